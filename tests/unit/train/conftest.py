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

# A five-sentence treebank in PTB form: every label 0-4 occurs, one root is neutral.
SST_TREES = [
    "(3 (2 It) (4 (2 is) (4 good)))",
    "(2 (2 An) (2 (2 average) (2 film)))",
    "(0 (1 (2 Truly) (0 awful)) (2 .))",
    "(4 (3 (2 A) (4 gem)) (2 !))",
    "(1 (2 Not) (1 (2 quite) (3 right)))",
]


@pytest.fixture
def sst_data_dir(tmp_path: Path) -> Path:
    """A data folder whose ``sst/`` train, dev and test splits are all ``SST_TREES``."""
    root = tmp_path / "data"
    (root / "sst").mkdir(parents=True)
    for split in ("train", "dev", "test"):
        (root / "sst" / f"{split}.txt").write_text("\n".join(SST_TREES) + "\n")
    return root


@pytest.fixture
def sst_overrides(sst_data_dir: Path) -> Callable[..., list[str]]:
    """``overrides(*extra)``: two quick epochs of ``sst_treelstm`` on ``sst_data_dir``."""

    def overrides(*extra: str) -> list[str]:
        return [
            "experiment=sst_treelstm",
            f"paths.data_dir={sst_data_dir}",
            "model.hidden_size=8",
            "trainer.epochs=2",
            "trainer.batch_size=2",
            "trainer.progress=false",
            "trainer.plots=false",
            *extra,
        ]

    return overrides


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
