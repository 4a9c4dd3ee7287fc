"""``experiment=molecules_csv`` on the real ESOL file (``FOLDEXP_DATA``): the ESOL preset and the
same file named by path give the same run, and ESOL thresholded into a 0/1 task (logS < -3,
written to a temporary CSV.gz) trains as a classifier selected on dev ROC AUC."""

from __future__ import annotations

import csv
import gzip
from pathlib import Path

import pytest

from foldexp.train.app import compose_config
from foldexp.train.loop import run_train

ESOL_TARGET = "measured log solubility in mols per litre"
QUICK = [
    "dataset.limit=200",
    "trainer.epochs=2",
    "trainer.progress=false",
    "trainer.plots=false",
    "model.atom_size=16",
    "model.pair_size=16",
    "model.graph_size=32",
    "model.mlp_size=32",
]


@pytest.fixture
def esol_file(data_root: Path) -> Path:
    path = data_root / "molecules" / "delaney-processed.csv"
    if not path.is_file():
        pytest.skip(f"no ESOL under FOLDEXP_DATA={data_root}")
    return path


def _scores(results: dict) -> dict:
    return {k: v for k, v in results.items() if k.startswith(("test_", "best_"))}


def test_the_esol_preset_is_molecules_csv_on_the_file(
    esol_file: Path, data_root: Path, tmp_path: Path
) -> None:
    cache = f"paths.cache_dir={tmp_path / 'cache'}"
    preset = run_train(
        compose_config(
            ["experiment=esol_weave", f"paths.data_dir={data_root}", cache, *QUICK], tmp_path / "a"
        )
    )
    by_path = run_train(
        compose_config(
            [
                "experiment=molecules_csv",
                f"dataset.path={esol_file}",
                f"dataset.targets=[{ESOL_TARGET}]",
                "trainer.select_metric=dev_rmse",
                "trainer.select_mode=min",
                cache,
                *QUICK,
            ],
            tmp_path / "b",
        )
    )
    assert _scores(preset) == _scores(by_path) and preset["test_rmse"] > 0


def test_esol_thresholded_trains_as_a_classifier(esol_file: Path, tmp_path: Path) -> None:
    with open(esol_file, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    lines = ["smiles,insoluble"] + [
        f"{r['smiles'].strip()},{int(float(r[ESOL_TARGET]) < -3)}" for r in rows
    ]
    path = tmp_path / "esol_insoluble.csv.gz"
    path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    args = [
        "experiment=molecules_csv",
        f"dataset.path={path}",
        "dataset.targets=[insoluble]",
        "dataset.task=classification",
        "dataset.split=scaffold",
        f"paths.cache_dir={tmp_path / 'cache'}",
        *QUICK,
    ]
    results = run_train(compose_config(args, tmp_path / "run"))
    assert results["select_metric"] == "dev_roc_auc"
    # Solubility is largely size and polarity: even two short epochs rank better than chance.
    assert 0.5 < results["test_roc_auc"] <= 1 and 0 < results["test_prc_auc"] <= 1
