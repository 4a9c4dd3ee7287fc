"""``foldexp report`` on hand-made run folders: sorting, seed summaries, long override labels."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from foldexp.analysis.report import run_report


def _run(root: Path, name: str, seed: int, acc: float, overrides: list[str]) -> None:
    d = root / name
    (d / ".hydra").mkdir(parents=True)
    (d / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    (d / "results.json").write_text(
        json.dumps({"experiment": "sst_treelstm", "seed": seed, "test_accuracy": acc, "config": {}})
    )


def test_report_sorts_summarises_and_draws_long_labels(tmp_path: Path) -> None:
    long = "dataset.word_vectors=/a/very/long/path/to/some/glove/vectors/glove.6B.50d.txt.gz"
    _run(tmp_path, "0", 1, 0.48, [long, "seed=1"])
    _run(tmp_path, "1", 2, 0.50, [long, "seed=2"])
    _run(tmp_path, "2", 1, 0.40, ["model.hidden_size=8", "seed=1"])
    df = run_report([tmp_path], metric="test_accuracy")  # warnings are errors in this suite
    assert df["test_accuracy"].tolist() == [0.50, 0.48, 0.40]
    summary = pd.read_csv(tmp_path / "summary.csv")
    assert summary["count"].tolist() == [2, 1]
    assert summary["mean"].iloc[0] == pytest.approx(0.49)
    assert (tmp_path / "report.png").stat().st_size > 0


def test_report_names_missing_metric(tmp_path: Path) -> None:
    _run(tmp_path, "0", 1, 0.5, [])
    with pytest.raises(KeyError, match="test_rmse"):
        run_report([tmp_path], metric="test_rmse")
