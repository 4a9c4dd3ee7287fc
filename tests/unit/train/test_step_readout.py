"""A GPU run reads its steps' losses back every few steps (``fit.StepReadout``), not at every
step: the same run, the same metrics, and a NaN still named by its step. The read-back interval
is forced here (``read_every``), as a CUDA run takes it, so the CPU can check it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from foldexp.bench.overhead import count_ops
from foldexp.models.tree_lstm import TreeLSTMClassifier
from foldexp.train import fit
from foldexp.train.app import compose_config
from foldexp.train.loop import TrainingDiverged, run_train


def _deferred(monkeypatch: pytest.MonkeyPatch, every: int) -> None:
    monkeypatch.setattr(fit, "read_every", lambda device, ctx: every)
    monkeypatch.setattr(fit, "SECONDS_PER_READ", 1e9)  # by count only: repeatable


def test_a_run_read_back_every_few_steps_is_the_same_run(
    tiny: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = [*tiny, "trainer.epochs=2"]
    each = run_train(compose_config(args, tmp_path / "each"))
    _deferred(monkeypatch, 4)
    deferred = run_train(compose_config(args, tmp_path / "deferred"))
    volatile = {"train_seconds", "config"}  # the config names the run folder
    assert {k: v for k, v in each.items() if k not in volatile} == {
        k: v for k, v in deferred.items() if k not in volatile
    }
    curves = [
        pd.read_csv(tmp_path / run / "metrics.csv").drop(columns="epoch_seconds")
        for run in ("each", "deferred")
    ]
    assert curves[0].equals(curves[1])


def test_steps_between_read_backs_do_not_wait_for_the_device(
    tiny: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _deferred(monkeypatch, 4)
    real = fit._step
    syncs: list[int] = []

    def counted(*args: Any) -> bool:
        result: list[bool] = []
        syncs.append(count_ops(lambda: result.append(real(*args))).syncs)
        return result[0]

    monkeypatch.setattr(fit, "_step", counted)
    run_train(compose_config([*tiny, "trainer.epochs=1"], tmp_path))
    assert len(syncs) > 8 and syncs == [0] * len(syncs), syncs  # no .item(), bool() or float()


def test_a_nan_read_back_late_names_its_step(
    tiny: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _deferred(monkeypatch, 4)
    real = TreeLSTMClassifier.forward
    calls = {"n": 0}

    def poisoned(self, batch):  # type: ignore[no-untyped-def]
        out = real(self, batch)
        calls["n"] += self.training
        if self.training and calls["n"] == 6:
            out["loss"] = out["loss"] * float("nan")
        return out

    monkeypatch.setattr(TreeLSTMClassifier, "forward", poisoned)
    with pytest.raises(TrainingDiverged, match=r"loss became nan at epoch 0, step 6 \(read 2 "):
        run_train(compose_config([*tiny, "trainer.epochs=1"], tmp_path))


def test_an_evaluation_reads_its_batches_statistics_together(
    tiny: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = fit.evaluate_split
    syncs: list[int] = []

    def counted(run: Any, split: str) -> dict[str, Any]:
        result: list[dict[str, Any]] = []
        syncs.append(count_ops(lambda: result.append(real(run, split))).syncs)
        return result[0]

    monkeypatch.setattr(fit, "evaluate_split", counted)
    run_train(compose_config([*tiny, "trainer.epochs=1", "trainer.eval_batch_size=8"], tmp_path))
    # The loader's own seed, drawn on the CPU, is the one read; not a float() per statistic
    # per batch (before: one per statistic and batch).
    assert len(syncs) == 1 and syncs[0] <= 1, syncs
