"""Shared checks for the trainer's tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from foldexp.train.app import compose_config
from foldexp.train.loop import run_train

_VOLATILE = {"train_seconds", "config"}


@pytest.fixture
def tiny() -> list[str]:
    """Overrides for a few-second run of the default experiment (epochs left to the test)."""
    return [
        "dataset.n=300",
        "trainer.batch_size=16",
        "trainer.progress=false",
        "trainer.plots=false",
        "model.hidden_size=16",
        "model.embed_size=8",
    ]


@pytest.fixture
def resume_matches_uninterrupted(tmp_path: Path) -> Callable[[list[str]], dict[str, Any]]:
    """``check(args)``: a 2-epoch run equals a 1-epoch run resumed to 2 epochs — results and
    every epoch's metrics. Returns the uninterrupted run's results (in ``tmp_path / "ref"``)."""

    def check(args: list[str]) -> dict[str, Any]:
        reference = run_train(compose_config([*args, "trainer.epochs=2"], tmp_path / "ref"))
        run_train(compose_config([*args, "trainer.epochs=1"], tmp_path / "cut"))
        resumed = run_train(
            compose_config([*args, "trainer.epochs=2", "trainer.resume=true"], tmp_path / "cut")
        )
        assert {k: v for k, v in resumed.items() if k not in _VOLATILE} == {
            k: v for k, v in reference.items() if k not in _VOLATILE
        }
        curves = [
            pd.read_csv(tmp_path / run / "metrics.csv").drop(columns="epoch_seconds")
            for run in ("ref", "cut")
        ]
        assert curves[0].equals(curves[1])  # every epoch, not only the selected checkpoint
        return reference

    return check
