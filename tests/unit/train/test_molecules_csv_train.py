"""``experiment=molecules_csv``: a molecule CSV of one's own trains by config alone, for
regression and for 0/1 classification (masked BCE, ROC / PRC AUC, selection on dev ROC AUC);
the builder's refusals; per-example outputs concatenated over an epoch; prediction inputs."""

from __future__ import annotations

import gzip
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch

from foldexp.config.errors import ConfigError
from foldexp.data.errors import DatasetNotFoundError, DataWarning, FormatError, MoleculeError
from foldexp.experiments.molecule_data import molecule_inputs, molecules_csv
from foldexp.models.scores import average_precision, roc_auc
from foldexp.models.weave import WeaveModel, WeaveRegressor
from foldexp.train import distributed as dd
from foldexp.train.app import compose_config
from foldexp.train.loop import run_train

SMILES = [
    "CCO", "CCCC", "c1ccccc1", "CC(=O)O", "CCN", "OCCO", "c1ccncc1", "CC(C)O", "ClCCl",
    "CCOCC", "C1CCCCC1", "c1ccc2ccccc2c1", "CC#N", "CCCl", "O=C1CCCCC1", "Cc1ccccc1",
    "CS(C)=O", "NCCO", "FC(F)F", "C=CC", "Oc1ccccc1", "CCCCO", "C1CCOC1", "c1ccoc1",
]  # fmt: skip
# The split column: every part holds molecules with and without a ring.
FOLDS = ["train"] * 16 + ["Valid", "valid", "dev", "valid", "TEST", "test", "test", "test"]
FOLDS[2], FOLDS[16] = FOLDS[16], FOLDS[2]  # a ring (benzene) in dev
FOLDS[6], FOLDS[20] = FOLDS[20], FOLDS[6]  # a ring (pyridine) in test
SIZES = ["model.atom_size=8", "model.pair_size=6", "model.graph_size=8", "model.mlp_size=8"]


def _ring(smiles: str) -> int:
    return int(any(ch.isdigit() for ch in smiles))


def _classification_csv(tmp_path: Path, name: str = "tasks.csv") -> Path:
    """Two tasks: ``ring`` (every label) and ``oxygen`` (every third label missing)."""
    lines = ["smiles,ring,oxygen,fold"]
    for k, (s, fold) in enumerate(zip(SMILES, FOLDS, strict=True)):
        oxygen = "" if k % 3 == 0 else str(int("o" in s.lower()))
        lines.append(f"{s},{_ring(s)},{oxygen},{fold}")
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def _regression_csv(tmp_path: Path) -> Path:
    lines = ["SMILES\tlogp\tsize"]  # tab-separated, another SMILES column name
    for k, s in enumerate(SMILES):
        lines.append(f"{s}\t{0.1 * k - 1:.2f}\t{'' if k % 4 == 0 else len(s)}")
    path = tmp_path / "reg.tsv"
    path.write_text("\n".join(lines) + "\n")
    return path


def _args(tmp_path: Path, path: Path, *extra: str) -> list[str]:
    return [
        "experiment=molecules_csv",
        f"dataset.path={path}",
        f"paths.cache_dir={tmp_path / 'cache'}",
        "trainer.epochs=2",
        "trainer.batch_size=8",
        "trainer.progress=false",
        "trainer.plots=false",
        *SIZES,
        *extra,
    ]


# ---------------------------------------------------------------------- training runs


def test_classification_by_config_alone(tmp_path: Path) -> None:
    path = _classification_csv(tmp_path)
    args = _args(
        tmp_path,
        path,
        "dataset.targets=[ring,oxygen]",
        "dataset.task=classification",
        "dataset.split=column",
        "dataset.split_column=fold",
    )
    results = run_train(compose_config(args, tmp_path / "run"))
    assert results["select_metric"] == "dev_roc_auc"
    metrics = pd.read_csv(tmp_path / "run" / "metrics.csv")
    assert results["best_dev_roc_auc"] == metrics["dev_roc_auc"].max()
    for split in ("train", "dev"):
        assert {f"{split}_roc_auc", f"{split}_prc_auc", f"{split}_roc_auc_ring"} <= set(metrics)
    assert 0 <= results["test_roc_auc"] <= 1 and 0 < results["test_prc_auc"] <= 1
    info = json.loads((tmp_path / "run" / "run_info.json").read_text())["info"]
    assert info["task"] == "classification" and info["target_names"] == ["ring", "oxygen"]


def test_classification_resumes_to_the_same_run(
    tmp_path: Path, resume_matches_uninterrupted: Callable[[list[str]], dict[str, Any]]
) -> None:
    """Per-example epoch outputs (tensors) go through last.pt and back unchanged."""
    args = _args(
        tmp_path,
        _classification_csv(tmp_path),
        "dataset.targets=[ring,oxygen]",
        "dataset.task=classification",
        "dataset.split=column",
        "dataset.split_column=fold",
        "trainer.checkpoint_every=1",
    )
    assert resume_matches_uninterrupted(args)["select_metric"] == "dev_roc_auc"


def test_regression_two_targets_missing_values_tab_separated(tmp_path: Path) -> None:
    args = _args(
        tmp_path,
        _regression_csv(tmp_path),
        "dataset.smiles_column=SMILES",
        "dataset.targets=[logp,size]",
        "dataset.fractions=[0.5,0.25,0.25]",
    )
    results = run_train(compose_config(args, tmp_path / "run"))
    assert results["select_metric"] == "dev_rmse"
    assert {"test_rmse", "test_mae", "test_rmse_logp", "test_rmse_size"} <= set(results)
    assert all(np.isfinite(results[k]) for k in ("test_rmse", "test_rmse_size"))


def test_classification_train_test_only_file_gz_and_skip(tmp_path: Path) -> None:
    """A gzipped file whose split column names train and test only, with one bad SMILES."""
    text = _classification_csv(tmp_path).read_text()
    text = text.replace("valid", "train").replace("Valid", "train").replace("dev", "train")
    text += "C1CC,1,0,train\n"  # RDKit cannot parse it: skipped with a warning
    path = tmp_path / "tasks.csv.gz"
    path.write_bytes(gzip.compress(text.encode()))
    args = _args(
        tmp_path,
        path,
        "dataset.targets=[ring]",
        "dataset.task=classification",
        "dataset.split=column",
        "dataset.split_column=fold",
        "dataset.on_invalid=skip",
        "dataset.fractions=[0.6,0.4,0.0]",  # dev gets 0.4 / (0.6 + 0.4) of train
        "seed=4",
        "trainer.epochs=1",
        "trainer.limit_batches=2",
    )
    with pytest.warns(DataWarning, match=r"1 invalid SMILES.*row 25 \(line 26\): 'C1CC'"):
        results = run_train(compose_config(args, tmp_path / "run"))
    assert 0 <= results["test_roc_auc"] <= 1


# ---------------------------------------------------------------------- the builder


def _build(path: Path, **keys):
    return molecules_csv(str(path), **{"cache_dir": None, **keys})


def test_builder_info_is_plain_json_and_balance_weights_positives(tmp_path: Path) -> None:
    bundle = _build(
        _classification_csv(tmp_path),
        targets=["ring", "oxygen"],
        task="classification",
        split="column",
        split_column="fold",
        balance=True,
    )
    assert json.loads(json.dumps(bundle.info)) == bundle.info
    labels = np.stack([m.targets for m in bundle.train])
    mask = np.stack([m.target_mask for m in bundle.train])
    pos = ((labels == 1) & mask).sum(0)
    neg = ((labels == 0) & mask).sum(0)
    assert bundle.info["pos_weight"] == pytest.approx((neg / pos).tolist())
    assert (len(bundle.train), len(bundle.dev), len(bundle.test)) == (16, 4, 4)
    assert "c1ccccc1" in [m.smiles for m in bundle.dev]


def test_task_auto_by_default_chooses_classification_for_0_1_columns_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A toxicity file without dataset.task trained as regression (RMSE) without a word."""
    from foldexp.experiments.build import build_dataset

    columns = ["dataset.targets=[ring,oxygen]", "dataset.split=column", "dataset.split_column=fold"]
    cfg = compose_config(_args(tmp_path, _classification_csv(tmp_path), *columns))
    assert cfg.dataset.task == "auto"
    with caplog.at_level(logging.INFO, logger="foldexp.experiments.molecule_data"):
        assert build_dataset(cfg.dataset).info["task"] == "classification"
    said = [r.getMessage() for r in caplog.records if "dataset.task=auto" in r.getMessage()]
    assert len(said) == 1 and "training classification" in said[0], said
    assert "every label of ring, oxygen is 0, 1 or empty" in said[0]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="foldexp.experiments.molecule_data"):
        bundle = _build(_regression_csv(tmp_path), targets=["logp", "size"], smiles_column="SMILES")
    assert bundle.info["task"] == "regression"
    assert "dataset.task=auto: training regression (column 'logp' holds -1" in caplog.text
    # a column of one value is a constant, not two classes
    constant = tmp_path / "ones.csv"
    constant.write_text("smiles,y\n" + "".join(f"{s},1.0\n" for s in ["CCO", "CCN", "CCC"]))
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="foldexp.experiments.molecule_data"):
        assert _build(constant, targets=["y"], fractions=[1, 0, 0]).info["task"] == "regression"
    assert "training regression (the labels are all 0 or all 1)" in caplog.text
    # a trained run's task wins (foldexp eval of a file whose labels happen to be 0/1)
    trained = {"task": "regression"}
    path = _classification_csv(tmp_path)
    assert _build(path, targets=["ring"], trained=trained).info["task"] == "regression"
    with pytest.raises(ConfigError, match="dataset.task=auto chose regression"):
        _build(_regression_csv(tmp_path), targets=["logp"], smiles_column="SMILES", balance=True)


def test_labels_other_than_0_1_are_refused_naming_row_and_column(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("smiles,active\nCCO,1\nCCC,0\nCCN,2\nCCCl,0.5\n")
    with pytest.raises(MoleculeError, match=r"bad\.csv: .*row 3 \(line 4\), column 'active': 2"):
        _build(path, targets=["active"], task="classification")


# A quoted name spanning three lines: the rows after it are no longer on line row + 1.
SPANNING = 'name,smiles,active,fold\n"a\nlong\nname",CCO,1,train\nb,CCC,0,train\n'


@pytest.mark.parametrize(
    ("rows", "keys", "message"),
    [
        ("c,CCN,2,test\nd,CCCl,0,test\n", {}, r"row 3 \(line 6\), column 'active': 2"),
        # the record itself spans lines: named by its first
        ('"c\nc",CCN,x,test\n', {}, r"multi\.csv:6: row 3, column 'active': expected a number"),
        ('c,CCN,0,test\n"d\nd",CCCl\n', {}, r"multi\.csv:7: row 4: expected 4 fields, got 2"),
        (
            "c,CCN,0,holdout\n",
            {"split": "column", "split_column": "fold"},
            r"column 'fold': row 3 \(line 6\) says 'holdout'",
        ),
        ("c,C1CC,0,test\nd,CCCl,1,test\n", {}, r"invalid SMILES .*: row 3 \(line 6\): 'C1CC'"),
    ],
)
def test_errors_name_the_line_a_row_starts_on_after_a_field_spanning_lines(
    tmp_path: Path, rows: str, keys: dict, message: str
) -> None:
    path = tmp_path / "multi.csv"
    path.write_text(SPANNING + rows)
    with pytest.raises(FormatError, match=message):
        _build(path, targets=["active"], task="classification", **keys)


def test_a_split_without_labels_is_refused_before_training(tmp_path: Path) -> None:
    path = tmp_path / "holes.csv"
    rows = [f"{s},{'' if f == 'valid' else k},{f}" for k, (s, f) in enumerate(zip(SMILES[:6], [
        "train", "train", "train", "valid", "test", "test"]))]  # fmt: skip
    path.write_text("smiles,y,fold\n" + "\n".join(rows) + "\n")
    with pytest.raises(MoleculeError, match="the dev split .* has no labelled target"):
        _build(path, targets=["y"], split="column", split_column="fold")


def test_a_dev_split_with_one_class_is_refused_for_classification(tmp_path: Path) -> None:
    path = tmp_path / "one.csv"
    labels = [0, 1, 0, 1, 1, 1, 0, 1]
    folds = ["train"] * 4 + ["valid", "valid", "test", "test"]
    rows = [f"{s},{y},{f}" for s, y, f in zip(SMILES, labels, folds)]
    path.write_text("smiles,y,fold\n" + "\n".join(rows) + "\n")
    with pytest.raises(MoleculeError, match="dev split .* no task has both a 0 and a 1"):
        _build(path, targets=["y"], task="classification", split="column", split_column="fold")


def test_key_combinations_and_missing_files(tmp_path: Path) -> None:
    path = _classification_csv(tmp_path)
    with pytest.raises(ConfigError, match="dataset.split=column needs dataset.split_column"):
        _build(path, targets=["ring"], split="column")
    with pytest.raises(ConfigError, match="only read with dataset.split=column"):
        _build(path, targets=["ring"], split_column="fold")
    with pytest.raises(ConfigError, match="dataset.path is not set"):
        _build(Path("???"), targets=["ring"])
    with pytest.raises(ConfigError, match="balance=true .* needs task=classification"):
        _build(path, targets=["ring"], task="regression", balance=True)
    with pytest.raises(FileNotFoundError, match="dataset.path=.*nope.csv: no such file"):
        _build(tmp_path / "nope.csv", targets=["ring"])
    cfg = compose_config(["experiment=esol_weave", f"paths.data_dir={tmp_path}"], tmp_path / "r")
    with pytest.raises(DatasetNotFoundError, match="esol not found.*foldexp data fetch esol"):
        run_train(cfg)


# ---------------------------------------------------------------------- the model


class _Mol:
    """What the model reads of a ``MoleculeGraph``."""

    def __init__(self, rng: np.random.Generator, n: int, targets: list, mask: list) -> None:
        self.atom_features = rng.normal(size=(n, 4)).astype(np.float32)
        pairs = rng.normal(size=(n, n, 3)).astype(np.float32)
        self.pair_features = (pairs + pairs.transpose(1, 0, 2)) / 2
        self.targets = np.array(targets, np.float32)
        self.target_mask = np.array(mask)


def _classifier(**kw) -> WeaveModel:
    sizes = {"atom_size": 4, "pair_size": 3, "graph_size": 4, "mlp_size": 4}
    return WeaveModel(4, 3, 2, task="classification", target_names=["a", "b"], **sizes, **kw)


def test_classifier_loss_masks_missing_labels_and_weights_positives() -> None:
    rng = np.random.default_rng(0)
    mols = [_Mol(rng, 2, [1, 0], [True, True]), _Mol(rng, 3, [0, 1], [True, False])]
    model = _classifier(pos_weight=[3.0, 1.0])
    batch = model.collate(mols)
    out = model(batch)
    p = model.predict(batch).detach()
    y = torch.tensor([[1.0, 0.0], [0.0, 0.0]])
    bce = -(3.0 * y * p.log() + (1 - y) * (1 - p).log())
    torch.testing.assert_close(out["loss"], bce[[0, 0, 1], [0, 1, 0]].sum() / 3)
    assert out["probability"].shape == (2, 2) and out["labelled"].tolist() == [
        [True, True],
        [True, False],
    ]
    assert model.prediction_columns() == ["a_probability", "b_probability"]
    assert model.selection() == ("roc_auc", "max")
    assert WeaveRegressor is WeaveModel


def test_classifier_summary_is_the_mean_auc_over_tasks_with_both_classes() -> None:
    model = _classifier()
    probs = torch.tensor([[0.5, 0.9], [0.5, 0.1], [0.9, 0.2], [0.1, 0.3], [0.5, 0.8]])
    labels = torch.tensor([[0, 1], [1, 1], [1, 0], [0, 1], [1, 0]], dtype=torch.float32)
    labelled = torch.ones(5, 2, dtype=torch.bool)
    labelled[:, 1] = torch.tensor([True, True, False, False, False])  # b: only 1s labelled
    metrics = model.summarize({"probability": probs, "label": labels, "labelled": labelled})
    # Task a alone (b's labelled entries are all 1s): 5 of 6 positive-negative pairs ranked
    # right, counting a tie as 1/2 (the hand count of tests/unit/data/test_molecules_csv.py).
    assert metrics["roc_auc"] == pytest.approx(5 / 6)
    assert metrics["roc_auc_a"] == pytest.approx(5 / 6)
    assert np.isnan(metrics["roc_auc_b"])
    assert metrics["prc_auc"] == pytest.approx(average_precision(labels[:, 0], probs[:, 0]))
    labelled[:, 0] = False
    labelled[:, 1] = True  # b alone now has both classes
    metrics = model.summarize({"probability": probs, "label": labels, "labelled": labelled})
    assert metrics["roc_auc"] == pytest.approx(roc_auc(labels[:, 1], probs[:, 1]))
    labelled[:] = False
    assert np.isnan(model.summarize({"probability": probs, "label": labels, "labelled": labelled})[
        "roc_auc"
    ])  # fmt: skip


def test_regression_predictions_in_original_units_and_columns() -> None:
    rng = np.random.default_rng(2)
    model = WeaveModel(
        4, 3, 2, [1.5, 2.0], [0.5, 4.0], atom_size=4, pair_size=3, graph_size=4, mlp_size=4,
        target_names=["logS", "log S"],
    )  # fmt: skip
    batch = model.collate([_Mol(rng, 2, [1, 5], [True, True])])
    z = model.compiler.run(batch.plan).detach()
    expected = z * torch.tensor([0.5, 4.0]) + torch.tensor([1.5, 2.0])
    torch.testing.assert_close(model.predict(batch).detach(), expected)
    assert model.prediction_columns() == ["logS", "log S"]
    assert model.selection() == ("rmse", "min")
    # per-target metric columns carry the names as written (tests/unit/train/test_target_names.py)
    assert set(model.summarize({"count": 1.0})) == {
        "rmse", "mae", "rmse_logS", "mae_logS", "rmse_log S", "mae_log S"
    }  # fmt: skip
    with pytest.raises(ValueError, match="target 'logS' is given twice"):  # whose keys would clash
        WeaveModel(4, 3, 2, [1.5, 2.0], [0.5, 4.0], target_names=["logS", "logS"])


# ---------------------------------------------------------------------- epoch sums


def test_accumulate_concatenates_per_example_tensors_and_keeps_scalar_sums(tmp_path: Path) -> None:
    sums: dict = {}
    dd.accumulate(sums, {"loss": torch.tensor(0.5), "n": 2, "p": torch.tensor([[0.1], [0.2]])}, 2)
    dd.accumulate(sums, {"loss": torch.tensor(0.25), "n": 1, "p": torch.tensor([[0.3]])}, 1)
    assert sums["loss"] == 0.5 * 2 + 0.25 and sums["n"] == 3.0
    torch.testing.assert_close(sums["p"], torch.tensor([[0.1], [0.2], [0.3]]))
    other = {"loss": 1.0, "n": 4.0, "p": torch.tensor([[0.9]])}
    merged, count = dd.merge([(sums, 3), (other, 1)])
    assert merged["n"] == 7.0 and count == 4
    torch.testing.assert_close(merged["p"], torch.tensor([[0.1], [0.2], [0.3], [0.9]]))
    torch.save({"epoch_sums": merged}, tmp_path / "p.pt")
    back = torch.load(tmp_path / "p.pt", weights_only=True)["epoch_sums"]
    assert back["n"] == 7.0 and torch.equal(back["p"], merged["p"])


# ---------------------------------------------------------------------- prediction inputs


def test_molecule_inputs_never_fail_on_one_bad_smiles() -> None:
    parsed = molecule_inputs(["CCO", "C1CC", "  ", " c1ccccc1 "])
    assert [error is None for _, error in parsed] == [True, False, False, True]
    assert "invalid SMILES 'C1CC'" in parsed[1][1] and parsed[2][1] == "empty SMILES"
    graph = parsed[3][0]
    assert graph.smiles == "c1ccccc1" and graph.n_atoms == 6 and not graph.target_mask.any()
    model = WeaveModel(44, 14, 1, atom_size=4, pair_size=3, graph_size=4, mlp_size=4)
    assert model.predict(model.collate([parsed[0][0], graph])).shape == (2, 1)


def test_the_featurisation_cache_is_the_users_cache_folder_and_is_logged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Training created ./data/cache in the working folder without a word."""
    from foldexp.experiments.build import build_dataset

    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.delenv("FOLDEXP_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    path = _classification_csv(tmp_path)
    args = ["experiment=molecules_csv", f"dataset.path={path}", "dataset.targets=[ring]"]
    cfg = compose_config(args, tmp_path / "run")
    assert cfg.dataset.cache_dir == str(tmp_path / "xdg" / "foldexp" / "data")
    with caplog.at_level(logging.INFO, logger="foldexp.experiments.molecule_data"):
        build_dataset(cfg.dataset)
    assert f"featurised molecules are cached in {tmp_path / 'xdg'}" in caplog.text
    assert list(work.iterdir()) == [] and any((tmp_path / "xdg" / "foldexp" / "data").iterdir())
    monkeypatch.setenv("FOLDEXP_CACHE", str(tmp_path / "mine"))
    assert compose_config(args, tmp_path / "run").dataset.cache_dir == str(tmp_path / "mine")
