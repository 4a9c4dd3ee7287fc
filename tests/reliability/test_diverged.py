"""A non-finite loss stops the run with advice that fits its cause.

Finite weights and a NaN loss mean the batch itself is at fault (its data or the loss), so
lowering the learning rate would not help; non-finite weights mean the optimisation diverged.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from foldexp.models.tree_lstm import TreeLSTMClassifier
from foldexp.train.app import compose_config
from foldexp.train.loop import TrainingDiverged, run_train

TINY = ["dataset.n=60", "trainer.epochs=1", "trainer.progress=false", "trainer.plots=false"]


def test_a_nan_from_the_data_does_not_advise_a_lower_learning_rate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = TreeLSTMClassifier.forward

    def nan_batch(self, batch):  # type: ignore[no-untyped-def]
        out = real(self, batch)
        if self.training:
            out["loss"] = out["loss"] + float("nan")  # as a NaN target would
        return out

    monkeypatch.setattr(TreeLSTMClassifier, "forward", nan_batch)
    with pytest.raises(TrainingDiverged) as err:
        run_train(compose_config(TINY, tmp_path))
    assert "check the data for NaN" in str(err.value)
    assert "optimizer.lr" not in str(err.value)


def test_diverged_weights_advise_a_lower_learning_rate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = TreeLSTMClassifier.forward

    def blown_up(self, batch):  # type: ignore[no-untyped-def]
        out = real(self, batch)
        if self.training:
            with torch.no_grad():
                self.classify.weight.fill_(float("inf"))
            out["loss"] = out["loss"] * float("inf")
        return out

    monkeypatch.setattr(TreeLSTMClassifier, "forward", blown_up)
    with pytest.raises(TrainingDiverged, match=r"lower optimizer\.lr or set trainer\.grad_clip"):
        run_train(compose_config(TINY, tmp_path))
