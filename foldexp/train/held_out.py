"""The test split's predictions, kept after training: ``test_predictions.csv`` and its plots.

A run over targets (a molecule CSV's) writes, once its best checkpoint is scored on test, one row
per test molecule: its SMILES, each target's value as the file gives it (blank where missing)
and the model's predictions (``predicted_<column>``: ``model.prediction_columns()``, values in
the targets' units or each task's positive probability). With ``trainer.plots``, beside the
learning curves: ``test_parity.png`` for regression (predicted against true, a panel per target,
the first ``MAX_PANELS``) or ``test_roc.png`` and ``test_pr.png`` for classification (a curve per
target on one axis). A model without ``predict`` or a dataset without targets writes nothing.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from foldexp.data.cells import spreadsheet_row
from foldexp.train.artifacts import atomic_write, write_text

__all__ = ["MAX_PANELS", "write_test_predictions"]

MAX_PANELS = 12  # targets drawn at most (the CSV holds them all)


def _predictions(model: Any, examples: Sequence[Any], batch_size: int) -> np.ndarray:
    model.eval()
    parts = []
    with torch.no_grad():
        for start in range(0, len(examples), batch_size):
            batch = model.collate(list(examples[start : start + batch_size]))
            parts.append(model.predict(batch).detach().float().cpu().numpy())
    return np.concatenate(parts) if parts else np.zeros((0, 0), np.float32)


def write_test_predictions(
    out_dir: Path,
    model: Any,
    examples: Sequence[Any],
    info: Mapping[str, Any],
    batch_size: int,
    plots: bool,
) -> Path | None:
    """Writes ``test_predictions.csv`` (and its plots, with ``plots``); its path, or ``None``
    where the model or the data have no targets to predict."""
    names = [str(n) for n in info.get("target_names") or []]
    if not (callable(getattr(model, "predict", None)) and hasattr(model, "prediction_columns")):
        return None
    if not names or not examples or not hasattr(examples[0], "target_mask"):
        return None
    columns = list(model.prediction_columns())
    predicted = _predictions(model, examples, batch_size)  # (N, len(columns))
    truth = np.stack([np.asarray(e.targets, dtype=np.float64) for e in examples])  # (N, T)
    mask = np.stack([np.asarray(e.target_mask, dtype=bool) for e in examples])  # (N, T)
    text = io.StringIO()
    out = csv.writer(text, lineterminator="\n")
    out.writerow(spreadsheet_row(["smiles", *names, *(f"predicted_{c}" for c in columns)]))
    for e, values, known, row in zip(examples, truth, mask, predicted, strict=True):
        labels = [f"{v:.6g}" if k else "" for v, k in zip(values, known, strict=True)]
        out.writerow(spreadsheet_row([e.smiles, *labels, *(f"{p:.6g}" for p in row)]))
    path = out_dir / "test_predictions.csv"
    write_text(path, text.getvalue())
    if plots:
        classify = info.get("task") == "classification"
        suffix = "_probability" if classify else ""
        index = {c: k for k, c in enumerate(columns)}
        picked = [(k, n, index[n + suffix]) for k, n in enumerate(names) if n + suffix in index]
        scores = [(n, truth[mask[:, k], k], predicted[mask[:, k], j]) for k, n, j in picked]
        if classify:
            _curves(scores[:MAX_PANELS], out_dir, len(names))
        else:
            _parity(scores[:MAX_PANELS], info, out_dir / "test_parity.png", len(names))
    return path


def _figure(panels: int) -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(panels, 4)
    rows = math.ceil(panels / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 3.0 * rows), squeeze=False)
    return fig, axes


def _save(fig: Any, path: Path) -> None:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=90))
    plt.close(fig)


def _parity(
    scores: list[tuple[str, np.ndarray, np.ndarray]], info: Mapping[str, Any], path: Path, n: int
) -> None:
    """Predicted against true per target, the diagonal drawn, RMSE in each title."""
    if not scores:
        return
    units = dict(zip(info.get("target_names") or [], info.get("target_units") or [], strict=False))
    fig, axes = _figure(len(scores))
    for ax, (name, true, pred) in zip(axes.flat, scores, strict=False):
        rmse = float(np.sqrt(np.mean((pred - true) ** 2))) if len(true) else float("nan")
        ax.scatter(true, pred, s=8, alpha=0.6)
        if len(true):
            low, high = float(min(true.min(), pred.min())), float(max(true.max(), pred.max()))
            ax.plot([low, high], [low, high], color="grey", linewidth=0.8)
        unit = f" ({units[name]})" if units.get(name) else ""
        ax.set_title(f"{name}: RMSE {rmse:.3g}{unit}", fontsize=9)
        ax.set_xlabel("true", fontsize=8)
        ax.set_ylabel("predicted", fontsize=8)
    for ax in list(axes.flat)[len(scores) :]:
        ax.set_visible(False)
    shown = f"; the first {len(scores)} of {n} targets" if n > len(scores) else ""
    fig.suptitle(f"test split: predicted against true{shown}", fontsize=10)
    _save(fig, path)


def roc_points(true: np.ndarray, score: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(false positive rate, true positive rate)`` at every threshold, from (0, 0) to (1, 1);
    tied scores make one step."""
    order = np.argsort(-score, kind="stable")
    true, score = true[order] > 0.5, score[order]
    last = np.r_[np.nonzero(np.diff(score))[0], len(score) - 1]  # the end of each tie
    tp, fp = np.cumsum(true)[last], np.cumsum(~true)[last]
    pos, neg = max(int(true.sum()), 1), max(int((~true).sum()), 1)
    return np.r_[0.0, fp / neg], np.r_[0.0, tp / pos]


def _curves(scores: list[tuple[str, np.ndarray, np.ndarray]], out_dir: Path, n: int) -> None:
    """``test_roc.png`` and ``test_pr.png``: a curve per target with both classes in test."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    usable = [(name, t, s) for name, t, s in scores if len(t) and 0 < (t > 0.5).sum() < len(t)]
    if not usable:
        return
    shown = f" (the first {len(scores)} of {n} targets)" if n > len(scores) else ""
    for kind in ("roc", "pr"):
        fig, ax = plt.subplots(figsize=(5, 4.5))
        for name, true, score in usable:
            fpr, tpr = roc_points(true, score)
            if kind == "roc":
                ax.plot(fpr, tpr, label=name, linewidth=1)
            else:
                found = tpr * max(int((true > 0.5).sum()), 1)
                flagged = found + fpr * max(int((true <= 0.5).sum()), 1)
                precision = np.divide(found, flagged, out=np.ones_like(found), where=flagged > 0)
                ax.plot(tpr, precision, label=name, linewidth=1)
        if kind == "roc":
            ax.plot([0, 1], [0, 1], color="grey", linewidth=0.8, linestyle="--")
        ax.set_xlabel("false positive rate" if kind == "roc" else "recall")
        ax.set_ylabel("true positive rate" if kind == "roc" else "precision")
        ax.set_title(f"test split: {kind.upper()} curves{shown}", fontsize=10)
        if len(usable) <= MAX_PANELS:
            ax.legend(fontsize=7)
        _save(fig, out_dir / f"test_{kind}.png")
