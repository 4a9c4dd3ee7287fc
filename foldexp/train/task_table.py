"""A run over many targets (a 12-task toxicity file) told compactly: per-task metrics stay in
``metrics.csv`` and ``results.json``, and the run ends with one table of them.

A model scoring several targets reports, beside the mean over targets (``dev_roc_auc``), one
metric per target named ``<split>_<metric>_<target>`` (``dev_roc_auc_NR-AR``: the target's name
as the data file writes it, the same in every output; ``target_suffixes``). The epoch line
leaves those out (``compact_metrics``); the learning curves draw them as one figure of small
multiples (``curves.plot_curves``); and ``write_task_table`` writes ``results.md`` and
``per_task.csv`` at the end: each target's labelled test molecules (and positives, for
classification) and its test ROC AUC and PRC AUC, or RMSE and MAE in the target's units
(``dataset.units``).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from foldexp.data.cells import markdown_cell, spreadsheet_row
from foldexp.models.target_names import target_suffixes
from foldexp.train.artifacts import write_text

__all__ = [
    "compact_metrics",
    "per_task_keys",
    "target_suffixes",
    "write_task_table",
]

_CLASSIFICATION = ("roc_auc", "prc_auc")
_REGRESSION = ("rmse", "mae")


def per_task_keys(keys: Sequence[str], suffixes: Sequence[str]) -> set[str]:
    """The keys of ``keys`` that are one target's metric: ``<base>_<suffix>`` where ``<base>``
    (the mean over targets) is a key too. None for a single target."""
    if len(suffixes) < 2:
        return set()
    present, wanted = set(keys), set(suffixes)
    # each split at an underscore, not each suffix: linear in the keys for 1,000 targets too
    return {
        key
        for key in keys
        for i, char in enumerate(key)
        if char == "_" and key[i + 1 :] in wanted and key[:i] in present
    }


def compact_metrics(
    row: Mapping[str, Any], suffixes: Sequence[str], where: str = "metrics.csv"
) -> str:
    """The epoch's log line: every float but the per-target ones (the means stay, and so does
    the selection metric, a mean); ``where`` the per-target ones are."""
    hidden = per_task_keys(list(row), suffixes)
    shown = ", ".join(
        f"{k}={v:.4f}" for k, v in row.items() if isinstance(v, float) and k not in hidden
    )
    if hidden:
        shown += f" ({len(suffixes)} targets: each in {where})"
    return shown


def _counts(examples: Sequence[Any], k: int) -> tuple[int, int]:
    """Labelled test examples of target ``k`` and how many of them are 1."""
    labelled = positives = 0
    for example in examples:
        if bool(np.asarray(example.target_mask)[k]):
            labelled += 1
            positives += int(np.asarray(example.targets)[k] == 1)
    return labelled, positives


def _cell(value: Any) -> str:
    return (
        "" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.4f}"
    )


def write_task_table(
    out_dir: Path, results: Mapping[str, Any], info: Mapping[str, Any], test: Sequence[Any]
) -> list[str]:
    """``results.md`` and ``per_task.csv``: one row per target of the test split. Returns the
    Markdown table's lines (for the log); nothing for a dataset without targets."""
    names = info.get("target_names")
    if not names or not test or not hasattr(test[0], "target_mask"):
        return []
    classify = info.get("task") == "classification"
    metrics = _CLASSIFICATION if classify else _REGRESSION
    units = list(info.get("target_units") or [""] * len(names))
    suffixes = target_suffixes(names)
    header = ["task", "labelled", "positives"] if classify else ["task", "labelled", "units"]
    header += [m.replace("_", "-").upper() for m in metrics]
    rows = []
    for k, (name, suffix) in enumerate(zip(names, suffixes, strict=True)):
        labelled, positives = _counts(test, k)
        key = (lambda m: f"test_{m}") if len(names) == 1 else (lambda m, s=suffix: f"test_{m}_{s}")
        row = [str(name), str(labelled), str(positives) if classify else units[k]]
        rows.append(row + [_cell(results.get(key(m))) for m in metrics])
    mean = ["mean", "", ""] + [_cell(results.get(f"test_{m}")) for m in metrics]
    table = [header, *rows, *([mean] if len(names) > 1 else [])]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    # target names come from the data file's header: cells that break neither table
    lines += ["| " + " | ".join(markdown_cell(c) for c in r) + " |" for r in table[1:]]
    text = io.StringIO()
    csv.writer(text, lineterminator="\n").writerows(spreadsheet_row(r) for r in table)
    write_text(out_dir / "per_task.csv", text.getvalue())
    title = f"# Test scores per target (best epoch {results.get('best_epoch')})\n\n"
    write_text(out_dir / "results.md", title + "\n".join(lines) + "\n")
    return lines
