"""Cross-validation: ``dataset.split=kfold|scaffold_kfold`` with ``dataset.folds`` and
``dataset.fold``: each fold's parts partition the data, the test folds are disjoint and cover
it, scaffolds never straddle parts, a fold out of range fails at compose time, and
``foldexp report`` averages the folds."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from foldexp.analysis.report import run_report
from foldexp.config.errors import ConfigError
from foldexp.data.folds import kfold_split, scaffold_fold_assignment, scaffold_kfold_split
from foldexp.data.splits import murcko_scaffold
from foldexp.experiments.molecule_data import molecules_csv
from foldexp.train.app import compose_config
from foldexp.train.artifacts import write_text

SMILES = [
    "CCO", "CCCC", "c1ccccc1", "CC(=O)O", "CCN", "OCCO", "c1ccncc1", "CC(C)O", "ClCCl",
    "CCOCC", "C1CCCCC1", "c1ccc2ccccc2c1", "CC#N", "CCCl", "O=C1CCCCC1", "Cc1ccccc1",
    "CS(C)=O", "NCCO", "FC(F)F", "C=CC", "Oc1ccccc1", "CCCCO", "C1CCOC1", "c1ccoc1",
]  # fmt: skip


def _check_partition(parts: tuple[np.ndarray, ...], n: int) -> None:
    joined = np.concatenate(parts)
    assert sorted(joined.tolist()) == list(range(n))  # disjoint, and every index once


@pytest.mark.parametrize("n, folds", [(23, 5), (10, 10), (7, 3)])
def test_kfold_test_parts_are_disjoint_and_cover(n: int, folds: int) -> None:
    tests = []
    for fold in range(folds):
        train, dev, test = kfold_split(n, folds, fold, (0.8, 0.1, 0.1), seed=3)
        _check_partition((train, dev, test), n)
        assert len(test) in (n // folds, n // folds + 1)
        tests.append(test)
    _check_partition(tuple(tests), n)
    # dev takes 1/9 of the other folds (fractions 0.8 : 0.1)
    train, dev, test = kfold_split(23, 5, 0, (0.8, 0.1, 0.1), seed=3)
    assert len(dev) == round((23 - len(test)) / 9)
    # seeded: the same seed the same folds, another seed others
    assert np.array_equal(kfold_split(23, 5, 1, seed=3)[2], kfold_split(23, 5, 1, seed=3)[2])
    assert not np.array_equal(kfold_split(23, 5, 1, seed=3)[2], kfold_split(23, 5, 1, seed=4)[2])


def test_scaffold_kfold_keeps_scaffolds_whole() -> None:
    scaffolds = [murcko_scaffold(s) for s in SMILES]
    assigned = scaffold_fold_assignment(SMILES, 4)
    for scaffold in set(scaffolds):
        folds = {int(assigned[i]) for i, s in enumerate(scaffolds) if s == scaffold}
        assert len(folds) == 1, scaffold
    tests = []
    for fold in range(4):
        parts = scaffold_kfold_split(SMILES, 4, fold)
        _check_partition(parts, len(SMILES))
        seen = [{scaffolds[i] for i in part} for part in parts]
        # no scaffold in two parts of one fold (the acyclic "" scaffold is one group too)
        assert not (seen[0] & seen[1] or seen[0] & seen[2] or seen[1] & seen[2])
        tests.append(parts[2])
    _check_partition(tuple(tests), len(SMILES))


def test_fold_out_of_range_fails_at_compose_time() -> None:
    base = ["experiment=molecules_csv", "dataset.path=x.csv", "dataset.targets=[y]"]
    with pytest.raises(ConfigError, match=r"dataset\.fold=5 is out of range: expected 0\.\.4"):
        compose_config([*base, "dataset.split=kfold", "dataset.fold=5"])
    with pytest.raises(ConfigError, match=r"dataset\.folds=1"):
        compose_config([*base, "dataset.split=kfold", "dataset.folds=1"])
    cfg = compose_config([*base, "dataset.split=scaffold_kfold", "dataset.folds=3"])
    assert (cfg.dataset.folds, cfg.dataset.fold) == (3, 0)


def test_molecules_csv_folds_cover_the_file(tmp_path: Path) -> None:
    path = tmp_path / "mols.csv"
    lines = ["smiles,y"] + [f"{s},{0.5 * k:.1f}" for k, s in enumerate(SMILES)]
    path.write_text("\n".join(lines) + "\n")
    tested: list[str] = []
    for fold in range(3):
        bundle = molecules_csv(str(path), ["y"], split="kfold", folds=3, fold=fold, seed=1)
        parts = [[g.smiles for g in part] for part in (bundle.train, bundle.dev, bundle.test)]
        assert sorted(sum(parts, [])) == sorted(SMILES)
        tested += parts[2]
        # the targets' statistics are the fold's training molecules', not the file's
        train_y = [float(g.targets[0]) for g in bundle.train]
        assert bundle.info["target_mean"][0] == pytest.approx(np.mean(train_y))
    assert sorted(tested) == sorted(SMILES)
    with pytest.raises(ValueError, match=r"dataset\.folds=30 but only 24 molecules"):
        molecules_csv(str(path), ["y"], split="kfold", folds=30, fold=0)


def test_report_averages_folds(tmp_path: Path) -> None:
    for fold, rmse in enumerate([1.0, 2.0, 3.0]):
        d = tmp_path / str(fold)
        (d / ".hydra").mkdir(parents=True)
        overrides = ["experiment=esol_weave", "dataset.split=kfold", f"dataset.fold={fold}"]
        (d / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
        results = {"experiment": "esol_weave", "seed": 0, "test_rmse": rmse}
        write_text(d / "results.json", json.dumps(results), checksum=True)
    run_report([tmp_path], metric="test_rmse", ascending=True)
    summary = pd.read_csv(tmp_path / "summary.csv")
    assert summary["count"].tolist() == [3]
    assert summary["mean"].iloc[0] == pytest.approx(2.0)
    assert summary["std"].iloc[0] == pytest.approx(1.0)
    assert summary["overrides"].iloc[0] == "experiment=esol_weave dataset.split=kfold"
