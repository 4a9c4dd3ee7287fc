"""One name per target everywhere, and a metric key per target that leads back to its column:
``NR-AR`` was ``NR_AR`` in ``metrics.csv``, ``results.json`` and the plots but ``NR-AR`` in
``results.md``, ``per_task.csv`` and ``predict``; names that normalised alike (``"a b"``,
``a_b``, ``a_b_1``) shared keys (``a_b_0``, ``a_b_1``, ``a_b_1``) and their scores were wrong."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pandas as pd
import pytest

from foldexp.analysis.predict import stream_predict
from foldexp.models.weave import target_suffixes
from foldexp.train.app import compose_config
from foldexp.train.loop import run_train

SMILES = ["CCO", "CCCC", "c1ccccc1", "CC(=O)O", "CCN", "OCCO", "c1ccncc1", "CC(C)O", "ClCCl",
          "CCOCC", "C1CCCCC1", "CC#N", "CCCl", "O=C1CCCCC1", "Cc1ccccc1", "NCCO"]  # fmt: skip
NAMES = ["NR-AR", "a b", "a_b", "a_b_1"]


def _train(tmp_path: Path) -> tuple[Path, dict]:
    path = tmp_path / "tasks.csv"
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["smiles", *NAMES])
        # a column of its own numbers each: a shared key would hold another target's score
        out.writerows([s, len(s), k % 3, k / 4, -k] for k, s in enumerate(SMILES))
    targets = ",".join(f"'{n}'" for n in NAMES)
    args = ["experiment=molecules_csv", f"dataset.path={path}", f"dataset.targets=[{targets}]",
            "dataset.fractions=[0.5,0.25,0.25]", f"paths.cache_dir={tmp_path / 'cache'}",
            "trainer.epochs=1", "trainer.batch_size=8", "trainer.progress=false",
            "trainer.plots=true", "model.atom_size=8", "model.pair_size=6",
            "model.graph_size=8", "model.mlp_size=8"]  # fmt: skip
    run = tmp_path / "run"
    return run, run_train(compose_config(args, run))


def test_each_target_keeps_its_name_and_its_own_keys(tmp_path: Path) -> None:
    run, results = _train(tmp_path)
    for split in ("train", "dev", "test"):
        for name in NAMES:
            assert f"{split}_rmse_{name}" in results or split != "test"
    saved = json.loads((run / "results.json").read_text())
    assert [k for k in saved if k.startswith("test_rmse_")] == [f"test_rmse_{n}" for n in NAMES]
    columns = pd.read_csv(run / "metrics.csv").columns
    assert all(f"dev_rmse_{n}" in columns for n in NAMES)
    assert not any("NR_AR" in c for c in columns)
    table = pd.read_csv(run / "per_task.csv")
    assert list(table["task"][: len(NAMES)]) == NAMES
    for name in NAMES:  # per_task.csv's score is results.json's, under the same name
        got = table.loc[table["task"] == name, "RMSE"].item()
        assert got == pytest.approx(results[f"test_rmse_{name}"], abs=1e-4)
    assert "| NR-AR |" in (run / "results.md").read_text()
    new = tmp_path / "new.csv"
    new.write_text("smiles\nCCO\n")
    stream_predict(run, str(new), tmp_path / "pred.csv")
    assert list(pd.read_csv(tmp_path / "pred.csv").columns[-5:-1]) == NAMES


def test_a_target_named_twice_or_not_at_all_is_refused() -> None:
    assert target_suffixes(["NR-AR", "a b"]) == ["NR-AR", "a b"]
    with pytest.raises(ValueError, match=r"target 'y' is given twice"):
        target_suffixes(["y", "x", "y"])
    with pytest.raises(ValueError, match=r"target 2 has no name"):
        target_suffixes(["y", " "])


def test_a_column_named_twice_in_the_targets_is_refused_before_reading(tmp_path: Path) -> None:
    from foldexp.config.errors import ConfigError

    args = ["experiment=molecules_csv", f"dataset.path={tmp_path / 'none.csv'}",
            "dataset.targets=[y,x,y]"]  # fmt: skip
    with pytest.raises(ConfigError, match=r"^dataset.targets names y twice; give each column"):
        run_train(compose_config(args, tmp_path / "run"))
