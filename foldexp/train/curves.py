"""A run's learning curves: ``metrics.csv`` (one row per epoch) and the plots drawn from it.

``write_metrics_csv`` writes the epochs' metrics atomically with a ``.sha256`` sidecar
(``artifacts.atomic_write``); ``plot_curves`` draws ``loss.png`` and one ``<metric>.png`` per
metric from that file, and for a run over several targets one figure of small multiples,
``per_task.png``. Plots can be redrawn from ``metrics.csv`` at any time (``rundir``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from foldexp.data.cells import spreadsheet_frame
from foldexp.train.artifacts import atomic_write

__all__ = ["MAX_PANELS", "per_task_due", "plot_curves", "write_metrics_csv"]

#: Panels of ``per_task.png`` at most: a page of 6 rows of 4.
MAX_PANELS = 24


def per_task_due(epoch: int, epochs: int, last: bool = False) -> bool:
    """Whether the training loop redraws ``per_task.png`` after ``epoch`` (from 0) of
    ``epochs``: after epochs 1, 2, 4, 8, … (counted from 1) and after the ``last`` one, so a run
    of E epochs draws it about log2(E) + 1 times, not E times."""
    done = epoch + 1
    return last or done >= epochs or done & (done - 1) == 0


def write_metrics_csv(path: str | os.PathLike[str], rows: list[dict[str, Any]]) -> Path:
    """One row per epoch, columns in first-seen order (with a ``.sha256`` sidecar)."""
    return atomic_write(
        path,
        lambda tmp: spreadsheet_frame(pd.DataFrame(rows)).to_csv(tmp, index=False),
        checksum=True,
    )


def plot_curves(
    csv_path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    title: str | None = None,
    best_epoch: int | None = None,
    tasks: Sequence[str] = (),
    units: Sequence[str] | None = None,
    per_task: bool = True,
) -> list[Path]:
    """Draws ``loss.png`` and ``<metric>.png`` from a ``metrics.csv`` (redrawable any time).

    Each plot is titled with the run (``title``, default: the run folder's name; the training
    loop's names the data file and the model) and marks ``best_epoch``, the checkpoint kept;
    losses go on a log axis, where late epochs' small differences stay visible. Epochs are
    whole numbers on the axis. ``tasks``: the targets' metric suffixes of a run over several
    targets; their per-target metrics (``dev_roc_auc_NR-AR``) make one figure of small
    multiples, ``per_task.png``, not a file each (at most ``MAX_PANELS`` panels; drawn only
    with ``per_task``). ``units``: each target's units, written on the RMSE and MAE axes.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from foldexp.train.task_table import per_task_keys

    df = pd.read_csv(csv_path)
    out_dir = Path(out_dir)
    title = title or out_dir.resolve().name
    task_keys = per_task_keys(list(df.columns), tasks)
    common = units[0] if units and len(set(units)) == 1 else None
    written = []
    metrics = sorted(
        {
            c.split("_", 1)[1]
            for c in df.columns
            if c.startswith(("train_", "dev_")) and "_" in c and c not in task_keys
        }
    )
    for metric in metrics:
        cols = [c for c in (f"train_{metric}", f"dev_{metric}") if c in df.columns]
        if not cols or df[cols].isna().all().all():
            continue
        fig, ax = plt.subplots(figsize=(5, 3.5))
        _curves(ax, df, cols, best_epoch, metric, common)
        ax.set_title(title, fontsize=9)
        ax.legend()
        written.append(_save_figure(plt, fig, out_dir / f"{metric}.png"))
    if task_keys and per_task:
        written.append(_small_multiples(plt, df, tasks, units, title, best_epoch, out_dir))
    return written


def _curves(
    ax: Any, df: pd.DataFrame, cols: list[str], best: int | None, metric: str, unit: str | None
) -> None:
    """Train and dev curves of one metric on ``ax``: whole epochs, one label per axis."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator, NullFormatter

    for c in cols:
        ax.plot(df["epoch"], df[c], marker="o", label=c.split("_", 1)[0])
    if best is not None and best >= 0:
        ax.axvline(best, color="grey", linestyle="--", label=f"best (epoch {best})")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # no epoch 0.5
    if metric == "loss" and (df[cols] > 0).all().all():
        ax.set_yscale("log")
        # plain numbers on the major ticks only: a log axis within one decade labelled its
        # minor ticks too, in another notation (0.6 beside 6×10⁻¹)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.3g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        low, high = df[cols].min().min(), df[cols].max().max()
        if high / low < 10:  # no decade inside: a few plain ticks across the data
            ax.set_yticks(np.geomspace(low, high, 4))
    ax.set_xlabel("epoch")
    is_error = metric.split("_", 1)[0] in ("rmse", "mae")
    ax.set_ylabel(f"{metric} ({unit})" if unit and is_error else metric)
    ax.grid(alpha=0.3)


def _small_multiples(
    plt: Any,
    df: pd.DataFrame,
    tasks: Sequence[str],
    units: Sequence[str] | None,
    title: str,
    best: int | None,
    out_dir: Path,
) -> Path:
    """``per_task.png``: one panel per target of its first per-target metric (ROC AUC for
    classification, RMSE for regression), train and dev; the first ``MAX_PANELS`` targets only,
    the title saying how many were left out (``metrics.csv`` and ``per_task.csv`` hold all):
    a figure's cost and size grow with its panels, and 1,000 took minutes an epoch."""
    base = next(
        m for m in ("roc_auc", "rmse", "prc_auc", "mae") if f"dev_{m}_{tasks[0]}" in df.columns
    )
    shown = list(tasks[:MAX_PANELS])
    width = min(4, len(shown))
    height = -(-len(shown) // width)
    fig, axes = plt.subplots(
        height, width, figsize=(3 * width, 2.4 * height), squeeze=False, sharex=True
    )
    for k, (ax, suffix) in enumerate(zip(axes.flat, shown, strict=False)):
        cols = [c for c in (f"train_{base}_{suffix}", f"dev_{base}_{suffix}") if c in df.columns]
        unit = units[k] if units else None
        _curves(ax, df, cols, best, base, unit)
        ax.set_title(suffix, fontsize=9)
        ax.set_xlabel("")
    for ax in list(axes.flat)[len(shown) :]:
        ax.set_visible(False)
    axes.flat[0].legend(fontsize=7)
    left_out = len(tasks) - len(shown)
    more = f" (the first {len(shown)}; {left_out} more in metrics.csv)" if left_out else ""
    fig.suptitle(f"{title}: {base} per target{more}", fontsize=10)
    fig.supxlabel("epoch", fontsize=9)
    return _save_figure(plt, fig, out_dir / "per_task.png")


def _save_figure(plt: Any, fig: Any, path: Path) -> Path:
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=100))
    plt.close(fig)
    return path
