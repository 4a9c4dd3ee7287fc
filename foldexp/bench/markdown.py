"""Markdown tables for ``bench.md``: ours laid out like the papers', their figures beside ours.

Every function takes the tidy frame (``results``), so the report can be rebuilt from the CSV.
"""

from __future__ import annotations

import math

import pandas as pd

from foldexp.bench.peers import PEERS
from foldexp.bench.published import DYNET_TABLE2, DYNET_TOOLKITS, FOLD_COLUMNS, FOLD_TABLE1
from foldexp.bench.results import (
    scaling_summary,
    table1_summary,
    throughput_summary,
)
from foldexp.data.cells import markdown_cell

__all__ = ["render", "table1_markdown", "peers_markdown", "dynet_markdown", "scaling_markdown"]


def _f(x: float, digits: int = 3) -> str:
    """Seconds and ratios with ``digits`` significant digits; blanks for missing values."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if x == 0:
        return "0"
    if abs(x) >= 10**digits:
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(map(markdown_cell, header)) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(markdown_cell(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def _env_line(df: pd.DataFrame) -> str:
    r = df.iloc[0]
    return (
        f"device {r['device']}, {int(r['threads'])} threads, torch {r['torch']}, {r['machine']}; "
        f"preset `{r['preset']}`, seed {int(r['seed'])}"
    )


def _share(x: float) -> str:
    return f"{100 * x:.0f}%" if x == x else "–"


def table1_markdown(df: pd.DataFrame, mode: str) -> str:
    """Ours in the paper's layout, then the paper's CPU and GPU figures for the same sizes."""
    t = table1_summary(df, mode)
    d = df[(df["experiment"] == "table1") & (df["mode"] == mode)]
    state, leaves = int(d["state_size"].iloc[0]), int(d["size"].iloc[0])
    header = ["batch size", "manual batch", "manual tree", "dynamic batch", "dynamic tree",
              "full dyn. batch", "full dyn. tree", "cost ratio", "speedup ratio",
              "speedup vs per-node@1", "full/manual", "cost ratio (paired)",
              "full/manual (paired)", "schedule batch", "schedule share",
              "schedule share, traces cached"]  # fmt: skip
    rows = []
    for b, r in t.iterrows():
        rows.append([str(b)] + [_f(r[c]) for c in (
            "manual_batch", "manual_tree", "dynamic_batch", "dynamic_tree", "full_batch",
            "full_tree", "cost_ratio", "speedup_ratio", "speedup_node", "full_ratio",
            "cost_ratio_paired", "full_ratio_paired", "schedule_batch")]
            + [_share(r["schedule_share"]), _share(r["schedule_cached_share"])])  # fmt: skip
    out = [
        f"### Table 1, {mode} — trees of {leaves} leaves, state {state} (seconds, medians)",
        "",
        _table(header, rows),
        "",
        "Paper (Looks et al. 2017, Table 1: inference, state 1024; CPU: 32 hardware threads, "
        "GPU: GTX-1080) beside our ratios:",
        "",
    ]
    head = ["batch size", "ours cost", "paper CPU cost", "paper GPU cost", "ours speedup",
            "ours speedup vs per-node@1", "paper CPU speedup", "paper GPU speedup",
            "paper CPU manual tree", "paper CPU full tree"]  # fmt: skip
    prow = []
    ci, si = FOLD_COLUMNS.index("cost_ratio"), FOLD_COLUMNS.index("speedup_ratio")
    mi, fi = FOLD_COLUMNS.index("manual_tree"), FOLD_COLUMNS.index("full_tree")
    for b in sorted(set(t.index) | set(FOLD_TABLE1["cpu"]), reverse=True):
        cpu, gpu = FOLD_TABLE1["cpu"].get(b), FOLD_TABLE1["gpu"].get(b)
        ours = t.loc[b] if b in t.index else None
        prow.append([
            str(b),
            _f(ours["cost_ratio"]) if ours is not None else "–",
            _f(cpu[ci]) if cpu else "–", _f(gpu[ci]) if gpu else "–",
            _f(ours["speedup_ratio"]) if ours is not None else "–",
            _f(ours["speedup_node"]) if ours is not None else "–",
            _f(cpu[si]) if cpu else "–", _f(gpu[si]) if gpu else "–",
            _f(cpu[mi]) if cpu else "–", _f(cpu[fi]) if cpu else "–",
        ])  # fmt: skip
    out += [
        _table(head, prow),
        "",
        "Cost ratio = dynamic / manual (identical shapes); speedup ratio = manual per-tree time "
        "at batch 1 / full-dynamic per-tree time. Our manual batches each tree level in one call, "
        "so it is already fast at batch 1; the paper's manual graph had "
        "one op per node, which is what *speedup vs per-node@1* divides by. *(paired)* columns are "
        "the median over repeats of each repeat's own ratio (its cases run back to back, so it "
        "cancels drift between repeats). Time columns exclude "
        "schedule building, as the paper's did; it is reported on its own, for a new batch and "
        "for the same batch built with its inputs' traces kept (``cache_traces``, as foldexp's "
        "models do from their second epoch on; the plan itself is built anew).",
    ]
    return "\n".join(out)


def peers_markdown(df: pd.DataFrame) -> str:
    """Trees/s per implementation, fastest first, with the engine's speedup over each."""
    t = throughput_summary(df, "peers")
    d = df[df["experiment"] == "peers"]
    r0 = d.iloc[0]
    title = (
        f"### Peers — binary Tree-LSTM (hidden {int(r0['state_size'])}), {int(r0['size'])}-leaf "
        "random trees, forward + loss + backward per step"
    )
    eng = t.loc[t["column"] == "engine", "per_s"]
    eng_rate = float(eng.iloc[0]) if len(eng) else math.nan
    rows = []
    for _, r in t.sort_values("per_s", ascending=False, na_position="last").iterrows():
        name = PEERS.get(r["column"], r["column"])
        if r["per_s"] != r["per_s"]:
            rows.append([name, "–", "–", "–", "–", "–", str(r["note"])])
            continue
        sched = r["schedule_s"] / r["median"]
        rows.append([
            name,
            f"{r['per_s']:,.0f}",
            f"{r['per_s_min']:,.0f}–{r['per_s_max']:,.0f}",
            f"{eng_rate / r['per_s']:.2f}x" if r["column"] != "engine" else "–",
            str(int(r["items"])),
            _f(r["loss"], 5),
            str(r["note"]).split(";")[0]
            + (f"; schedule {100 * sched:.0f}% of the step" if sched == sched else ""),
        ])  # fmt: skip
    header = ["implementation", "trees/s (median)", "min–max", "engine speedup", "trees/step",
              "loss", "note"]  # fmt: skip
    foot = (
        "Engine speedup = engine trees/s ÷ that row's trees/s, all measured in this run, round "
        "by round. The loss is a check that every implementation computed the same thing (the "
        "PyTorch peers share weights and agree exactly; DyNet initialises its own)."
    )
    return "\n".join([title, "", _table(header, rows), "", foot])


def dynet_markdown(df: pd.DataFrame) -> str:
    """Our words/s (sentences/s) per task beside DyNet's Table 2 (CPU, one thread)."""
    t = throughput_summary(df, "dynet_tasks")
    d = df[df["experiment"] == "dynet_tasks"]
    rows = []
    for _, r in t.iterrows():
        key = r["column"]
        paper = DYNET_TABLE2.get(key, (None,) * len(DYNET_TOOLKITS))
        rows.append([
            key, str(int(r["batch_size"])), f"{r['per_s']:,.1f} {r['unit']}/s",
            *[_f(p) if p is not None else "–" for p in paper],
        ])  # fmt: skip
    header = ["task", "minibatch", f"ours ({int(d['threads'].iloc[0])} thr.)", *DYNET_TOOLKITS]
    return "\n".join([
        "### DyNet paper tasks (Neubig et al. 2017, Table 2: CPU, one thread, dense updates)",
        "",
        _table(header, rows),
        "",
        "DyNet's tagger and Tree-LSTM figures are for one sentence at a time (minibatch 1).",
    ])  # fmt: skip


def scaling_markdown(df: pd.DataFrame) -> str:
    parts = []
    for mode in sorted(df.loc[df["experiment"] == "scaling", "mode"].unique()):
        t = scaling_summary(df, mode)
        rows = [
            [r["shape"], str(int(r["leaves"])), _f(r.get("execute_tree")),
             _f(r.get("schedule_tree")), str(int(r["calls"])), str(int(r["depth"])),
             str(int(r["nodes"])), _f(r["nodes_per_call"])]
            for _, r in t.iterrows()
        ]  # fmt: skip
        header = ["shape", "leaves", "execute s/tree", "schedule s/tree", "launches", "depth",
                  "nodes", "nodes/launch"]  # fmt: skip
        parts += [f"### Scaling, {mode} — launches follow depth, not nodes", "",
                  _table(header, rows), ""]  # fmt: skip
    return "\n".join(parts)


def render(df: pd.DataFrame, summary: str = "") -> str:
    """The whole ``bench.md``: one section per experiment present in the frame."""
    parts = ["# foldexp bench", "", _env_line(df), ""]
    if summary:
        parts += [summary, ""]
    exps = set(df["experiment"])
    if "table1" in exps:
        for mode in dict.fromkeys(df.loc[df["experiment"] == "table1", "mode"]):
            parts += [table1_markdown(df, mode), ""]
    if "scaling" in exps:
        parts += [scaling_markdown(df)]
    if "peers" in exps:
        parts += [peers_markdown(df), ""]
    if "dynet_tasks" in exps:
        parts += [dynet_markdown(df), ""]
    return "\n".join(parts)
