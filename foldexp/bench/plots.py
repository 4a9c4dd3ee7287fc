"""Plots of a bench run, drawn from its CSV alone: ``redraw(run_dir)`` needs nothing else.

- ``table1_<mode>_per_tree.png``: seconds per tree vs batch size, log-log, manual / dynamic /
  full dynamic (the paper's three time columns);
- ``table1_<mode>_ratios.png``: cost ratio and speedup ratio vs batch size, the paper's CPU and
  GPU ratios dashed beside ours;
- ``scaling_<mode>.png``: launches and seconds per tree vs tree size, one line per shape;
- ``peers.png`` and ``dynet_tasks.png``: throughput bars.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pandas as pd

from foldexp.bench.published import FOLD_COLUMNS, FOLD_TABLE1, FOLD_TRAINING_COST_RATIO
from foldexp.bench.results import (
    read_csv,
    scaling_summary,
    table1_summary,
    throughput_summary,
)

__all__ = ["redraw", "plot_table1", "plot_scaling", "plot_throughput"]


def _plt() -> Any:
    """pyplot on the file-only Agg backend, imported on first use (as ``foldexp.train`` does)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> Path:
    plt = _plt()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_table1(df: pd.DataFrame, mode: str, out_dir: Path) -> list[Path]:
    plt = _plt()
    t = table1_summary(df, mode).sort_index()
    b = t.index.to_numpy()
    fig, ax = plt.subplots(figsize=(6, 4.2))
    for col, label, style in (("manual_tree", "manual", "o-"), ("dynamic_tree", "dynamic", "s-"),
                              ("full_tree", "full dynamic", "^-")):  # fmt: skip
        ax.loglog(b, t[col], style, label=label)
    ax.set_xlabel("batch size (trees)")
    ax.set_ylabel("seconds per tree")
    ax.set_title(f"Table 1, {mode}: time per tree")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    paths = [_save(fig, out_dir / f"table1_{mode}_per_tree.png")]

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, col, title in (
        (axes[0], "cost_ratio", "cost ratio (dynamic / manual)"),
        (axes[1], "speedup_ratio", "speedup ratio (manual@1 / full dynamic)"),
    ):
        if mode == "training" and col == "speedup_ratio":
            title += "; the paper gives none for training"
        ax.semilogx(b, t[col], "o-", label="ours")
        if col == "speedup_ratio" and t["speedup_node"].notna().any():
            ax.semilogx(b, t["speedup_node"], "s-", label="ours vs per-node manual@1")
        _paper_lines(ax, col, mode)
        if col == "cost_ratio":
            ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xlabel("batch size (trees)")
        ax.set_title(textwrap.fill(title, 44))  # two panels side by side: the title wraps
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()  # fmt: skip
    paths.append(_save(fig, out_dir / f"table1_{mode}_ratios.png"))
    return paths


def _paper_lines(ax: Any, col: str, mode: str) -> None:
    """The paper's figures for ``col``: its Table 1 columns for inference; for training, the one
    figure its text gives (the cost ratio, about 1.6), never the inference columns."""
    if mode != "training":
        k = FOLD_COLUMNS.index(col)
        for dev, style in (("cpu", "--"), ("gpu", ":")):
            pb = sorted(FOLD_TABLE1[dev])
            ax.semilogx(
                pb, [FOLD_TABLE1[dev][x][k] for x in pb], style, label=f"paper {dev.upper()}"
            )
    elif col == "cost_ratio":
        ax.axhline(
            FOLD_TRAINING_COST_RATIO, color="tab:red", linestyle="--",
            label="paper, training (text: about 1.6)",
        )  # fmt: skip


def plot_scaling(df: pd.DataFrame, mode: str, out_dir: Path) -> list[Path]:
    plt = _plt()
    t = scaling_summary(df, mode)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for shape, g in t.groupby("shape", sort=False):
        g = g.sort_values("leaves")
        axes[0].loglog(g["leaves"], g["calls"], "o-", label=f"{shape}: launches")
        axes[0].loglog(g["leaves"], g["nodes"] / g["nodes"].iloc[0] * g["calls"].iloc[0], ":",
                       color=axes[0].lines[-1].get_color(), alpha=0.5)  # fmt: skip
        if "execute_tree" in g:
            axes[1].loglog(g["leaves"], g["execute_tree"], "o-", label=f"{shape}: execute")
        if "schedule_tree" in g:
            axes[1].loglog(g["leaves"], g["schedule_tree"], "x--", label=f"{shape}: schedule")
    axes[0].set_title("launches per batch (dotted: if they grew like nodes)")
    axes[1].set_title("seconds per tree")
    for ax in axes:
        ax.set_xlabel("leaves per tree")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    return [_save(fig, out_dir / f"scaling_{mode}.png")]


def plot_throughput(df: pd.DataFrame, experiment: str, out_dir: Path) -> list[Path]:
    plt = _plt()
    t = throughput_summary(df, experiment).dropna(subset=["per_s"])
    if t.empty:
        return []
    labels = [f"{c} (mb {int(b)})" if experiment == "dynet_tasks" else c
              for c, b in zip(t["column"], t["batch_size"])]  # fmt: skip
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(t) + 1.5))
    err = [t["per_s"] - t["per_s_min"], t["per_s_max"] - t["per_s"]]
    ax.barh(labels, t["per_s"], xerr=err, color="tab:blue", alpha=0.8)
    ax.invert_yaxis()
    units = ", ".join(dict.fromkeys(t["unit"]))
    ax.set_xlabel(f"{units} per second (median; bars: min–max)")
    ax.set_title(experiment)
    ax.grid(True, axis="x", alpha=0.3)
    return [_save(fig, out_dir / f"{experiment}.png")]


def redraw(run_dir: str | Path) -> list[Path]:
    """Redraws every plot of a run from ``run_dir/bench.csv``; returns the files written."""
    run_dir = Path(run_dir)
    df = read_csv(run_dir)
    paths: list[Path] = []
    for exp in dict.fromkeys(df["experiment"]):
        modes = list(dict.fromkeys(df.loc[df["experiment"] == exp, "mode"]))
        if exp == "table1":
            for mode in modes:
                paths += plot_table1(df, mode, run_dir)
        elif exp == "scaling":
            for mode in modes:
                paths += plot_scaling(df, mode, run_dir)
        else:
            paths += plot_throughput(df, exp, run_dir)
    return paths
