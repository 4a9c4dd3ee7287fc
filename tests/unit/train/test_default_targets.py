"""Targets by default: with no ``dataset.targets``, a molecule CSV's numeric columns other than
the SMILES, split and ID-like columns are the targets, logged (it was refused: "dataset.targets
names no column"); a file without one is refused naming its columns; ``foldexp eval`` of a run
keeps the run's own targets."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from foldexp.config.errors import ConfigError
from foldexp.experiments.molecule_targets import default_targets, id_like
from foldexp.train.app import compose_config
from foldexp.train.loop import run_train

SMILES = ["CCO", "CCCC", "c1ccccc1", "CC(=O)O", "CCN", "OCCO", "c1ccncc1", "CC(C)O", "ClCCl",
          "CCOCC", "C1CCCCC1", "CC#N"]  # fmt: skip


def _csv(tmp_path: Path) -> Path:
    rows = ["Compound ID,smiles,logS,name,mw,,fold"]
    for k, s in enumerate(SMILES):
        fold = "train" if k < 8 else ("dev" if k < 10 else "test")
        rows.append(f"{100 + 7 * k},{s},{k / 3 - 1:.3f},mol {k},{len(s) * 12},{k},{fold}")
    path = tmp_path / "sol.csv"
    path.write_text("\n".join(rows) + "\n")
    return path


def test_the_numeric_columns_are_the_targets(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = _csv(tmp_path)
    with caplog.at_level(logging.INFO):
        assert default_targets(path, "???", "smiles", "fold") == ["logS", "mw"]
    assert "the numeric columns of sol.csv are the targets: logS, mw" in caplog.text
    assert "(ID-like columns left out: 'Compound ID', 'name', '')" not in caplog.text
    assert "(ID-like columns left out: 'Compound ID', '')" in caplog.text  # name: text
    args = ["experiment=molecules_csv", f"dataset.path={path}", "dataset.split=column",
            "dataset.split_column=fold", f"paths.cache_dir={tmp_path / 'c'}", "trainer.epochs=1",
            "trainer.progress=false", "trainer.plots=false", "model.atom_size=8",
            "model.pair_size=6", "model.graph_size=8", "model.mlp_size=8"]  # fmt: skip
    results = run_train(compose_config(args, tmp_path / "run"))
    assert {"test_rmse_logS", "test_rmse_mw"} <= set(results)
    assert default_targets(path, "???", "smiles", trained={"target_names": ["logS"]}) == ["logS"]
    assert default_targets(path, ["mw"], "smiles") == ["mw"]


def test_a_file_without_numbers_is_refused_naming_its_columns(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("smiles,id,label\nCCO,1,a\nCCC,2,b\n")
    with pytest.raises(ConfigError, match=r"no numeric column .*its columns: 'smiles', 'id', 'l"):
        default_targets(path, None, "smiles")


@pytest.mark.parametrize(
    ("name", "is_id"),
    [("id", True), ("ID", True), ("mol_id", True), ("Compound ID", True), ("name", True),
     ("index", True), ("Unnamed: 0", True), ("logS", False), ("NR-AR", False), ("y", False),
     ("Number of Rings", False), ("measured log solubility in mols per litre", False)],
)  # fmt: skip
def test_id_like_names(name: str, is_id: bool) -> None:
    assert id_like(name) is is_id


def test_a_molecule_run_is_filed_under_its_files_stem(tmp_path: Path) -> None:
    """Its output folder was molecules_csv/ for every file."""
    args = ["experiment=molecules_csv", f"dataset.path={tmp_path}/Tox 21.csv.gz"]
    assert compose_config(args).task_name == "Tox_21"
    assert compose_config(["experiment=molecules_csv"]).task_name == "molecules_csv"  # no file
