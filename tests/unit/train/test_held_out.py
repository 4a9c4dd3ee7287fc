"""After training, the test split's predictions are kept: ``test_predictions.csv`` (each test
molecule's SMILES, its targets as the file gives them, the model's predictions) and a parity
plot (regression) or ROC and PR curves (classification) beside the learning curves."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from foldexp.analysis.load_run import load_run
from foldexp.models.scores import roc_auc
from foldexp.train.app import compose_config
from foldexp.train.held_out import roc_points
from foldexp.train.loop import run_train

SMILES = ["CCO", "CCCC", "c1ccccc1", "CC(=O)O", "CCN", "OCCO", "c1ccncc1", "CC(C)O", "ClCCl",
          "CCOCC", "C1CCCCC1", "CC#N", "CCCl", "O=C1CCCCC1", "Cc1ccccc1", "NCCO"]  # fmt: skip
FOLDS = ["train"] * 8 + ["dev", "dev", "dev", "dev", "test", "test", "test", "test"]


def _run(tmp_path: Path, classify: bool) -> Path:
    path = tmp_path / "m.csv"
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["smiles", "y", "fold"])
        for k, (s, fold) in enumerate(zip(SMILES, FOLDS, strict=True)):
            ring = int(any(c.isdigit() for c in s))
            value = ring if classify else len(s) / 2
            out.writerow([s, "" if k == 13 else value, fold])  # one test label missing
    run = tmp_path / "run"
    args = ["experiment=molecules_csv", f"dataset.path={path}", "dataset.targets=[y]",
            "dataset.split=column", "dataset.split_column=fold",
            f"paths.cache_dir={tmp_path / 'cache'}", "trainer.epochs=1", "trainer.batch_size=4",
            "trainer.progress=false", "trainer.plots=true", "model.atom_size=8",
            "model.pair_size=6", "model.graph_size=8", "model.mlp_size=8"]  # fmt: skip
    run_train(compose_config(args, run))
    return run


@pytest.mark.parametrize("classify", [False, True], ids=["regression", "classification"])
def test_the_test_predictions_are_kept_with_their_plots(classify: bool, tmp_path: Path) -> None:
    run = _run(tmp_path, classify)
    table = pd.read_csv(run / "test_predictions.csv", keep_default_na=False)
    column = "predicted_y_probability" if classify else "predicted_y"
    assert list(table.columns) == ["smiles", "y", column]
    assert list(table["smiles"]) == SMILES[12:]  # the test split, in its order
    assert table["y"][1] == ""  # a missing label stays blank
    loaded = load_run(run).predict(SMILES[12:])  # the same model's predictions
    np.testing.assert_allclose(table[column], loaded[column.removeprefix("predicted_")], rtol=1e-5)
    pictures = ["test_roc.png", "test_pr.png"] if classify else ["test_parity.png"]
    assert all((run / p).stat().st_size > 0 for p in pictures)


def test_roc_points_give_the_area_the_run_reports(rng: np.random.Generator) -> None:
    true = rng.integers(0, 2, 200).astype(float)
    score = np.round(rng.random(200) + 0.3 * true, 1)  # ties too
    fpr, tpr = roc_points(true, score)
    assert fpr[0] == tpr[0] == 0 and fpr[-1] == tpr[-1] == 1
    area = float(np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2))
    assert area == pytest.approx(roc_auc(true, score), abs=1e-9)
