"""``device.compile`` from the command line's config to the training step: a run on the tape
trains as the per-group route does, repeats with its seed, and says which route it took."""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd
import pytest

from foldexp.train.app import compose_config
from foldexp.train.loop import run_train

TINY = [
    "dataset.n=200",
    "trainer.epochs=2",
    "trainer.batch_size=16",
    "trainer.progress=false",
    "trainer.plots=false",
    "model.hidden_size=8",
    "model.embed_size=8",
]


def _metrics(folder: Path) -> pd.DataFrame:
    return pd.read_csv(folder / "metrics.csv").drop(columns="epoch_seconds")


def test_a_run_on_the_tape_trains_as_the_per_group_route_does(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO):
        taped = run_train(compose_config([*TINY, "device.compile=graphs"], tmp_path / "tape"))
    assert "device.compile: graphs" in caplog.text
    plain = run_train(compose_config([*TINY, "device.compile=off"], tmp_path / "off"))
    assert taped["test_loss"] == pytest.approx(plain["test_loss"], rel=1e-4)
    pd.testing.assert_frame_equal(
        _metrics(tmp_path / "tape"), _metrics(tmp_path / "off"), rtol=1e-4, atol=1e-6
    )


def test_a_run_on_the_tape_repeats_with_its_seed_dropout_included(tmp_path: Path) -> None:
    args = [*TINY, "device.compile=graphs", "model.dropout=0.3"]
    a = run_train(compose_config(args, tmp_path / "a"))
    b = run_train(compose_config(args, tmp_path / "b"))
    assert a["test_loss"] == b["test_loss"]
    assert _metrics(tmp_path / "a").equals(_metrics(tmp_path / "b"))
