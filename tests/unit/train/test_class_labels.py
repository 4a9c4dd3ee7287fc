"""Class names in a molecule CSV's target column (``'(A) low'``, ``'(B) medium'``): the classes
come from the labels, one 0/1 target each named ``COLUMN=CLASS`` (it was refused: "expected a
number or an empty field"); ``foldexp eval`` of another file reads the run's own classes."""

from __future__ import annotations

from pathlib import Path

import pytest

from foldexp.analysis.evaluate_run import run_eval
from foldexp.config.errors import ConfigError
from foldexp.data.molecule_csv import class_of
from foldexp.experiments.molecule_targets import class_targets
from foldexp.train.app import compose_config
from foldexp.train.loop import run_train

SMILES = ["CCO", "CCCC", "c1ccccc1", "CC(=O)O", "CCN", "OCCO", "c1ccncc1", "CC(C)O", "ClCCl",
          "CCOCC", "C1CCCCC1", "CC#N", "CCCl", "O=C1CCCCC1", "Cc1ccccc1", "NCCO", "c1ccsc1",
          "FC(F)F", "C1CCNCC1", "C=CC"]  # fmt: skip
LABELS = ["(A) low", "(B) medium", "(C) high"]
CLASSES = [f"activity={c}" for c in LABELS]


def _csv(path: Path, rows: int) -> Path:
    lines = ["smiles,activity,fold"]
    for k, s in enumerate(SMILES[:rows]):
        fold = "train" if k < rows - 8 else ("dev" if k < rows - 4 else "test")
        lines.append(f"{s},{'' if k == 3 else LABELS[k % 3]},{fold}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_class_names_train_as_one_target_per_class(tmp_path: Path) -> None:
    path = _csv(tmp_path / "act.csv", 20)
    args = ["experiment=molecules_csv", f"dataset.path={path}", "dataset.targets=[activity]",
            "dataset.split=column", "dataset.split_column=fold",
            f"paths.cache_dir={tmp_path / 'c'}", "trainer.epochs=1", "trainer.progress=false",
            "trainer.plots=false", "model.atom_size=8", "model.pair_size=6",
            "model.graph_size=8", "model.mlp_size=8"]  # fmt: skip
    run = tmp_path / "run"
    results = run_train(compose_config(args, run))
    assert results["select_metric"] == "dev_roc_auc"  # classification, from the labels
    assert {f"test_roc_auc_{c}" for c in CLASSES} <= set(results)
    table = (run / "test_predictions.csv").read_text().splitlines()
    assert table[0].split(",")[1:4] == CLASSES
    # another file holding two of the classes: scored on the run's three
    other = tmp_path / "other.csv"
    other.write_text("smiles,activity\nCCO,(A) low\nCCCl,(B) medium\nCCN,(A) low\n")
    with pytest.raises(ConfigError, match="no column 'fold', which dataset.split_column names"):
        run_eval(run, [f"dataset.path={other}"], split="all")  # (the class targets are there)
    split = ["dataset.split=random", "dataset.split_column=null"]
    scores = run_eval(run, [f"dataset.path={other}", *split], split="all")
    assert f"all_roc_auc_{CLASSES[0]}" in scores and scores["examples"] == 3


def test_what_a_class_target_reads(tmp_path: Path) -> None:
    header = ["smiles", "activity", "a=b"]
    assert class_of("activity=(A) low", header) == ("activity", "(A) low")
    assert class_of("a=b", header) == ("a=b", None)  # a column's own name first
    assert class_of("activity", header) == ("activity", None)
    columns = [["CCO", "CCC"], ["x", "NA"], ["1", "2"]]
    assert class_targets(tmp_path, ["activity", "a=b"], header, columns) == ["activity=x", "a=b"]
    many = [[str(k) + "x" for k in range(1001)]]
    with pytest.raises(ConfigError, match="1001 different names, more than 1000 classes"):
        class_targets(tmp_path, ["id"], ["id"], many)
