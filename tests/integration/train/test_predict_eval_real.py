"""``foldexp predict`` and ``eval`` on a trained ``esol_weave`` run reproduce its own test scores.

The run is trained on real ESOL (``FOLDEXP_DATA``); predict reads the test molecules back from a
CSV, knowing nothing but the run folder, and its predictions give the run's test RMSE and MAE.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest

from foldexp.analysis.evaluate_run import run_eval
from foldexp.analysis.predict import run_predict
from foldexp.experiments.build import build_dataset
from foldexp.train.app import compose_config
from foldexp.train.loop import run_train

SMALL = [
    "experiment=esol_weave",
    "dataset.limit=160",
    "trainer.epochs=2",
    "trainer.progress=false",
    "trainer.plots=false",
    "model.atom_size=16",
    "model.pair_size=8",
    "model.graph_size=16",
    "model.mlp_size=16",
]


@pytest.fixture(scope="module")
def esol_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, list]:
    import os

    if not os.environ.get("FOLDEXP_DATA"):
        pytest.skip("FOLDEXP_DATA is not set to a data folder")
    out = tmp_path_factory.mktemp("esol")
    cfg = compose_config([*SMALL, f"paths.data_dir={os.environ['FOLDEXP_DATA']}"], out)
    results = run_train(cfg)
    return out, results, list(build_dataset(cfg.dataset).test)


def test_predict_reproduces_the_runs_test_scores(esol_run, tmp_path: Path) -> None:
    run, results, test = esol_run
    inputs = tmp_path / "test.csv"
    with open(inputs, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "smiles"])
        writer.writerows([k, g.smiles] for k, g in enumerate(test))
    rows = run_predict(run, str(inputs), tmp_path / "pred.csv")
    target = "measured log solubility in mols per litre"
    predicted = np.array([float(r[target]) for r in rows])
    truth = np.array([float(g.targets[0]) for g in test])
    assert all(r["error"] == "" for r in rows) and len(rows) == len(test)
    assert math.isclose(
        np.sqrt(np.mean((predicted - truth) ** 2)), results["test_rmse"], rel_tol=1e-5
    )
    assert math.isclose(np.mean(np.abs(predicted - truth)), results["test_mae"], rel_tol=1e-5)
    assert (tmp_path / "pred.csv").read_text().splitlines()[0] == f"smiles,id,{target},error"
    assert [r["id"] for r in rows] == [str(k) for k in range(len(test))]  # the ID comes through


def test_eval_reproduces_the_runs_test_scores(esol_run, tmp_path: Path) -> None:
    run, results, _ = esol_run
    scored = run_eval(run, out=tmp_path / "eval.json", run_paths=True)
    assert math.isclose(scored["test_rmse"], results["test_rmse"], rel_tol=1e-6)
    assert math.isclose(scored["test_loss"], results["test_loss"], rel_tol=1e-6)
