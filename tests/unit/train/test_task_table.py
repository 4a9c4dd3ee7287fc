"""A run over several targets is told compactly: an epoch line of means, one per-target table
at the end (``results.md``, ``per_task.csv``) and one figure of small multiples, instead of
about 50 metrics a line and a PNG per metric (issue 42); and the curves' axes read plainly:
whole epochs, one kind of label on a log-loss axis, units on RMSE axes, the data file named."""

from __future__ import annotations

import csv
import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from foldexp.data.molecule_graphs import MoleculeGraph
from foldexp.train.app import compose_config
from foldexp.train.curves import plot_curves
from foldexp.train.loop import run_train
from foldexp.train.task_table import compact_metrics, per_task_keys, write_task_table

TASKS = ["NR-AR", "SR-p53", "SR ARE"]
SUFFIXES = TASKS  # a target's metrics carry its name as the file writes it (was NR_AR)


def _row() -> dict[str, float | int]:
    row: dict[str, float | int] = {"epoch": 3, "train_loss": 0.5, "dev_roc_auc": 0.7}
    row |= {"dev_prc_auc": 0.4, "epoch_seconds": 1.5}
    for k, suffix in enumerate(SUFFIXES):
        row[f"dev_roc_auc_{suffix}"] = 0.6 + k / 10
        row[f"dev_prc_auc_{suffix}"] = 0.3 + k / 10
    return row


def test_the_epoch_line_keeps_the_means_and_leaves_per_target_metrics_out() -> None:
    line = compact_metrics(_row(), SUFFIXES)
    assert line == ("train_loss=0.5000, dev_roc_auc=0.7000, dev_prc_auc=0.4000, "
                    "epoch_seconds=1.5000 (3 targets: each in metrics.csv)")  # fmt: skip
    assert per_task_keys(list(_row()), SUFFIXES[:1]) == set()  # one target: nothing is per-task
    assert "dev_roc_auc_NR-AR" in compact_metrics(_row(), SUFFIXES[:1])


def _molecule(labels: list[float | None]) -> MoleculeGraph:
    mask = np.array([v is not None for v in labels])
    values = np.array([0.0 if v is None else v for v in labels], dtype=np.float32)
    none = np.zeros((1, 1), dtype=np.float32)
    return MoleculeGraph("C", none, none[None], values, mask)


def test_the_table_counts_each_targets_labelled_and_positive_test_molecules(
    tmp_path: Path,
) -> None:
    test = [_molecule([1, 0, None]), _molecule([1, None, 1]), _molecule([0, 1, 1])]
    results = {"best_epoch": 2, "test_roc_auc": 0.75, "test_prc_auc": 0.5}
    results |= {f"test_roc_auc_{s}": 0.5 + k / 4 for k, s in enumerate(SUFFIXES)}
    results |= {f"test_prc_auc_{s}": float("nan") for s in SUFFIXES}
    info = {"task": "classification", "target_names": TASKS}
    lines = write_task_table(tmp_path, results, info, test)
    assert lines[0] == "| task | labelled | positives | ROC-AUC | PRC-AUC |"
    rows = list(csv.reader((tmp_path / "per_task.csv").read_text().splitlines()))
    assert rows == [
        ["task", "labelled", "positives", "ROC-AUC", "PRC-AUC"],
        ["NR-AR", "3", "2", "0.5000", ""],
        ["SR-p53", "2", "1", "0.7500", ""],
        ["SR ARE", "2", "2", "1.0000", ""],
        ["mean", "", "", "0.7500", "0.5000"],
    ]
    assert "| SR-p53 | 2 | 1 | 0.7500 |  |" in (tmp_path / "results.md").read_text()


def test_target_names_from_the_file_break_neither_table(tmp_path: Path) -> None:
    test = [_molecule([1, 0]), _molecule([0, 1])]
    info = {"task": "classification", "target_names": ["=HYPERLINK(x)", "a|b"]}
    write_task_table(tmp_path, {"test_roc_auc": 1.0}, info, test)
    rows = list(csv.reader((tmp_path / "per_task.csv").read_text().splitlines()))
    assert rows[1][0] == "'=HYPERLINK(x)" and rows[2][0] == "a|b"
    assert "| a\\|b | 2 | 1 |" in (tmp_path / "results.md").read_text()


def test_a_regression_table_carries_the_units(tmp_path: Path) -> None:
    test = [_molecule([1.5]), _molecule([-2.0])]
    info = {"task": "regression", "target_names": ["expt"], "target_units": ["kcal/mol"]}
    write_task_table(tmp_path, {"test_rmse": 1.25, "test_mae": 1.0}, info, test)
    rows = list(csv.reader((tmp_path / "per_task.csv").read_text().splitlines()))
    assert rows == [["task", "labelled", "units", "RMSE", "MAE"],
                    ["expt", "2", "kcal/mol", "1.2500", "1.0000"]]  # fmt: skip


def test_curves_have_whole_epochs_plain_log_labels_units_and_one_figure_of_targets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import matplotlib.figure

    rows = []
    for epoch in range(2):  # a 2-epoch run's ticks read 0.5, 1.5
        row = {"epoch": epoch, "train_loss": 0.70 - epoch / 100, "dev_loss": 0.69}
        row |= {"train_rmse": 1.0, "dev_rmse": 1.1}
        row |= {f"dev_rmse_{s}": 1.0 + k for k, s in enumerate(SUFFIXES)}
        rows.append(row)
    pd.DataFrame(rows).to_csv(tmp_path / "metrics.csv", index=False)
    drawn: dict[str, matplotlib.figure.Figure] = {}
    savefig = matplotlib.figure.Figure.savefig

    def keep(fig: matplotlib.figure.Figure, target, **kw):  # type: ignore[no-untyped-def]
        drawn[str(len(drawn))] = fig
        return savefig(fig, target, **kw)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", keep)
    units = ["kcal/mol"] * 3
    paths = plot_curves(tmp_path / "metrics.csv", tmp_path, "tox.csv · weave", 1, SUFFIXES, units)
    assert sorted(p.name for p in paths) == ["loss.png", "per_task.png", "rmse.png"]
    loss, rmse, per_task = (drawn[k] for k in ("0", "1", "2"))
    for fig in (loss, rmse, per_task):
        for ax in fig.axes:
            if ax.get_visible():
                ticks = [t for t in ax.get_xticks() if 0 <= t <= 1]
                assert ticks and all(float(t).is_integer() for t in ticks), ticks
    (ax,) = loss.axes
    fig_labels = [t.get_text() for t in ax.get_yticklabels(minor=True) if t.get_text()]
    assert ax.get_yscale() == "log" and fig_labels == []
    assert all("10^" not in t.get_text() for t in ax.get_yticklabels())
    assert ax.get_title() == "tox.csv · weave"
    assert rmse.axes[0].get_ylabel() == "rmse (kcal/mol)"
    assert [a.get_title() for a in per_task.axes if a.get_visible()] == SUFFIXES


def test_a_multi_target_run_logs_means_and_ends_with_the_table(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    lines = ["smiles,A,B,C"]
    smiles = ["CCO", "CCCC", "c1ccccc1", "CC(=O)O", "CCN", "OCCO", "c1ccncc1", "CC(C)O", "ClCCl",
              "CCOCC", "C1CCCCC1", "CC#N", "CCCl", "Cc1ccccc1", "NCCO", "C=CC"] * 2  # fmt: skip
    for k, s in enumerate(smiles):
        lines.append(f"{s},{k % 2},{(k // 2) % 2},{'' if k % 5 == 0 else (k // 3) % 2}")
    (tmp_path / "tox.csv").write_text("\n".join(lines) + "\n")
    args = ["experiment=molecules_csv", f"dataset.path={tmp_path / 'tox.csv'}",
            "dataset.targets=[A,B,C]", f"paths.cache_dir={tmp_path / 'cache'}",
            "trainer.epochs=2", "trainer.batch_size=8", "trainer.progress=false",
            "model.atom_size=8", "model.pair_size=6", "model.graph_size=8", "model.mlp_size=8",
            "dataset.fractions=[0.5,0.25,0.25]"]  # fmt: skip
    with caplog.at_level(logging.INFO, logger="foldexp.train"):
        run_train(compose_config(args, tmp_path / "run"))
    epochs = [r.getMessage() for r in caplog.records if r.getMessage().startswith("epoch 1: t")]
    assert "dev_roc_auc=" in epochs[-1] and "roc_auc_A" not in epochs[-1], epochs
    assert "| task | labelled | positives | ROC-AUC | PRC-AUC |" in caplog.text
    run = tmp_path / "run"
    assert sorted(p.name for p in run.glob("*.png")) == [
        "loss.png", "per_task.png", "prc_auc.png", "roc_auc.png", "test_pr.png", "test_roc.png"
    ]  # fmt: skip
    assert (run / "results.md").is_file() and (run / "per_task.csv").is_file()


def test_the_curves_title_names_the_data_file_and_the_model(tmp_path: Path) -> None:
    """It named the experiment: every molecules_csv run read the same."""
    from foldexp.train.loop import _title

    cfg = compose_config(["experiment=molecules_csv", f"dataset.path={tmp_path / 'tox21.csv.gz'}",
                          "dataset.targets=[NR-AR]"], tmp_path / "run")  # fmt: skip
    assert _title(cfg, tmp_path / "run") == "tox21.csv.gz · weave · run (seed 0)"
    assert _title(compose_config([], tmp_path / "r"), tmp_path / "r").startswith("calculator · ")
