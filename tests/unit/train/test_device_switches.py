"""``device.onednn`` and ``device.keep_memory`` reach the run: the same model trains either way."""

from __future__ import annotations

from pathlib import Path

import pytest

from foldexp.kernels import dense, onednn_available, onednn_enabled
from foldexp.train.app import compose_config
from foldexp.train.loop import run_train


@pytest.mark.skipif(not onednn_available(), reason="torch built without oneDNN")
@pytest.mark.usefixtures("restore_onednn")
def test_onednn_switch_reaches_the_layers_and_results_agree(
    tiny: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []
    real = dense._mm
    monkeypatch.setattr(dense, "_mm", lambda *a: calls.append(1) or real(*a))
    args = [*tiny, "trainer.batch_size=64", "trainer.epochs=1"]  # levels of >= 48 rows
    on = run_train(compose_config([*args, "device.onednn=true"], tmp_path / "on"))
    assert calls, "no layer took the oneDNN route"
    calls.clear()
    off = run_train(
        compose_config([*args, "device.onednn=false", "device.keep_memory=false"], tmp_path / "off")
    )
    assert not calls and not onednn_enabled()
    # float rounding apart, the two routes train the same model
    assert off["test_accuracy"] == pytest.approx(on["test_accuracy"], abs=0.02)


@pytest.mark.usefixtures("restore_onednn")
def test_onednn_null_chooses_by_cpu(tmp_path: Path, tiny: list[str]) -> None:
    cfg = compose_config([*tiny, "device.onednn=null", "trainer.epochs=1"], tmp_path)
    assert cfg.device.onednn is None
    dense.set_onednn_enabled(not dense._pays_here())  # the opposite, so the run must set it
    run_train(cfg)
    assert onednn_enabled() is (onednn_available() and dense._pays_here())


def test_switches_are_typed(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="onednn"):
        compose_config(["device.onednn=sometimes"], tmp_path)
