"""``foldexp.load_run(path)``: a trained run from Python — its model in eval mode, its config
and ``predict(inputs)`` giving what ``foldexp predict`` writes for the same inputs."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import foldexp
from foldexp.analysis.predict import stream_predict
from foldexp.train.app import compose_config
from foldexp.train.loop import run_train


def test_a_run_loads_and_predicts_as_foldexp_predict(tiny: list[str], tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_train(compose_config([*tiny, "trainer.epochs=1"], run_dir))
    run = foldexp.load_run(run_dir)
    assert not run.model.training and run.config["model"]["hidden_size"] == 16
    inputs = ["(2+3)*4", "7", "((1+", "9-2"]
    got = run.predict(inputs, batch_size=2)
    assert list(got.columns) == ["input", *run.columns, "error"]
    assert list(got["input"]) == inputs and got["error"][2] and not got["error"][0]
    file = tmp_path / "in.txt"
    file.write_text("\n".join(inputs) + "\n")
    stream_predict(run_dir, str(file), tmp_path / "out.csv")
    written = pd.read_csv(tmp_path / "out.csv", keep_default_na=False)
    for column in run.columns:
        cli = pd.to_numeric(written[column], errors="coerce")
        pd.testing.assert_series_equal(got[column], cli, check_names=False)
    assert run.predict("7")["input"].tolist() == ["7"]
    with pytest.raises(FileNotFoundError, match="is not a trained run"):
        foldexp.load_run(tmp_path)
