"""The tidy results table and everything computed from it (medians, ratios, throughputs).

One CSV row per measurement (``CSV_NAME`` in the run folder). Summaries are medians over
repeats with min and max beside them; ratios are ratios of medians of cases measured side by
side, and Table 1 also gives the median of each repeat's own ratio (``*_paired``): the cases of
one repeat run back to back, so that ratio cancels the machine's drift between repeats. These
functions read only the frame, so ``plots.redraw`` and ``foldexp report`` can
recompute every table from the CSV alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "CSV_NAME",
    "FIELDS",
    "to_frame",
    "read_csv",
    "median_seconds",
    "table1_ratios",
    "paired_ratios",
    "table1_summary",
    "scaling_summary",
    "throughput_summary",
]

CSV_NAME = "bench.csv"

# Column order of the CSV; rows may leave any of the optional ones empty.
FIELDS = (
    "experiment", "preset", "mode", "column", "batch_size", "size", "shape", "state_size",
    "repeat", "seconds", "items", "unit", "calls", "depth", "nodes", "schedule_s", "loss",
    "load", "device", "threads", "torch", "machine", "seed", "note",
)  # fmt: skip


def to_frame(records: list[dict[str, Any]], defaults: dict[str, Any]) -> pd.DataFrame:
    """Records → the tidy frame: ``defaults`` (device, threads, ...) fill what a record lacks."""
    rows = [{**defaults, **r} for r in records]
    df = pd.DataFrame(rows)
    for f in FIELDS:
        if f not in df.columns:
            df[f] = np.nan
    extra = [c for c in df.columns if c not in FIELDS]
    return df[list(FIELDS) + extra]


def read_csv(path: str | Path) -> pd.DataFrame:
    """The CSV of a run folder (or the CSV path itself)."""
    p = Path(path)
    return pd.read_csv(p / CSV_NAME if p.is_dir() else p)


def median_seconds(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Median, min, max and count of ``seconds`` per group (measured rows only)."""
    d = df[df["seconds"].notna() & (df["repeat"] >= 0)]
    g = d.groupby(keys, dropna=False)["seconds"]
    return pd.DataFrame(
        {"median": g.median(), "min": g.min(), "max": g.max(), "n": g.count()}
    ).reset_index()


def table1_ratios(per_batch: pd.DataFrame) -> pd.DataFrame:
    """The paper's columns from median batch seconds.

    Args:
        per_batch: indexed by batch size, with columns ``manual``, ``dynamic``, ``full_dynamic``
            (median seconds per batch) and optionally ``schedule_full_dynamic`` and
            ``schedule_cached_full_dynamic``.

    Returns:
        per batch size: ``*_batch`` and ``*_tree`` seconds, ``cost_ratio`` = dynamic / manual,
        ``full_ratio`` = full dynamic / manual, ``speedup_ratio`` = manual per-tree time at
        batch size 1 / full-dynamic per-tree time (NaN without a batch-1 row), ``speedup_node``
        the same with the one-op-per-node manual time at batch 1 (column ``manual_node``, the
        paper's baseline), and the schedule time with its share of a full-dynamic step, also
        with per-input traces cached (``schedule_cached_*``).
    """
    t = per_batch.sort_index(ascending=False)
    b = t.index.to_numpy(dtype=float)
    out = pd.DataFrame(index=t.index)
    for col, name in (("manual", "manual"), ("dynamic", "dynamic"), ("full_dynamic", "full")):
        s = t[col] if col in t else pd.Series(np.nan, index=t.index)
        out[f"{name}_batch"] = s
        out[f"{name}_tree"] = s / b
    out["cost_ratio"] = out["dynamic_batch"] / out["manual_batch"]
    out["full_ratio"] = out["full_batch"] / out["manual_batch"]
    base = out["manual_tree"].get(1, np.nan)
    out["speedup_ratio"] = base / out["full_tree"]
    node = t["manual_node"].get(1, np.nan) if "manual_node" in t else np.nan
    out["speedup_node"] = node / out["full_tree"]
    for name, col in (
        ("schedule", "schedule_full_dynamic"),
        ("schedule_cached", "schedule_cached_full_dynamic"),
    ):
        out[f"{name}_batch"] = t[col] if col in t else np.nan
        out[f"{name}_share"] = out[f"{name}_batch"] / (out[f"{name}_batch"] + out["full_batch"])
    out.index.name = "batch_size"
    return out


def paired_ratios(d: pd.DataFrame) -> pd.DataFrame:
    """Per batch size, the median over repeats of ``dynamic / manual`` and ``full_dynamic /
    manual`` taken within each repeat (``cost_ratio_paired``, ``full_ratio_paired``).

    ``run_interleaved`` runs a repeat's cases back to back, so a repeat's own ratio compares
    times taken under the same background load; a ratio of medians can pair a quiet median with
    a busy one when the load drifts between repeats. Repeats missing a case are left out.
    """
    m = d[d["seconds"].notna() & (d["repeat"] >= 0)]
    m = m.assign(batch_size=m["batch_size"].astype(int))
    wide = m.pivot_table(
        index=["batch_size", "repeat"], columns="column", values="seconds", aggfunc="sum"
    )
    sizes = sorted(set(wide.index.get_level_values(0)), reverse=True)
    out = pd.DataFrame(index=pd.Index(sizes, name="batch_size"))
    for case, name in (("dynamic", "cost_ratio_paired"), ("full_dynamic", "full_ratio_paired")):
        has_both = case in wide and "manual" in wide
        # assigning a Series aligns it on batch size: a size with no complete repeat gets NaN
        out[name] = (
            (wide[case] / wide["manual"]).dropna().groupby(level=0).median() if has_both else np.nan
        )
    return out


def table1_summary(df: pd.DataFrame, mode: str) -> pd.DataFrame:
    """``table1_ratios`` of one mode's rows of the tidy frame, with ``paired_ratios`` beside."""
    d = df[(df["experiment"] == "table1") & (df["mode"] == mode)]
    med = median_seconds(d, ["batch_size", "column"])
    per_batch = med.pivot(index="batch_size", columns="column", values="median")
    per_batch.index = per_batch.index.astype(int)
    out = table1_ratios(per_batch)
    paired = paired_ratios(d)
    for col in paired.columns:
        out[col] = paired[col].reindex(out.index).to_numpy()
    return out


def scaling_summary(df: pd.DataFrame, mode: str = "inference") -> pd.DataFrame:
    """Per (shape, leaves): median seconds per tree (execute, schedule), launches, depth."""
    d = df[(df["experiment"] == "scaling") & (df["mode"] == mode)]
    if d.empty:
        return pd.DataFrame()
    keys = ["shape", "size", "column"]
    med = median_seconds(d, keys).pivot(index=["shape", "size"], columns="column", values="median")
    info = d.groupby(["shape", "size"])[["calls", "depth", "nodes", "batch_size"]].max()
    out = pd.DataFrame(index=med.index)
    for col in ("execute", "schedule"):
        if col in med:
            out[f"{col}_tree"] = med[col] / info["batch_size"]
    out[["calls", "depth", "nodes"]] = info[["calls", "depth", "nodes"]]
    out["nodes_per_call"] = out["nodes"] / out["calls"]
    return out.reset_index().rename(columns={"size": "leaves"})


def throughput_summary(df: pd.DataFrame, experiment: str) -> pd.DataFrame:
    """Per column (peer or task): items/s at the median (and at min/max) time, plus notes."""
    d = df[df["experiment"] == experiment]
    if d.empty:
        return pd.DataFrame()
    med = median_seconds(d, ["column", "batch_size", "items", "unit"])
    med["per_s"] = med["items"] / med["median"]
    med["per_s_min"] = med["items"] / med["max"]
    med["per_s_max"] = med["items"] / med["min"]
    firsts = d.groupby("column", sort=False).agg(
        note=("note", "last"), calls=("calls", "max"), schedule_s=("schedule_s", "median"),
        loss=("loss", "last"),
    )  # fmt: skip
    out = firsts.join(med.set_index("column"), how="left").reset_index()
    order = {c: i for i, c in enumerate(dict.fromkeys(d["column"]))}
    return out.sort_values("column", key=lambda s: s.map(order)).reset_index(drop=True)
