"""``run_bench(cfg)``: run the configured experiments, write CSV, markdown and plots, summarise.

Writes into ``paths.output_dir`` (the Hydra run folder): ``bench.csv`` (tidy, one row per
measurement), ``bench.md`` (tables in the papers' layouts with their figures beside ours), the
PNG plots of ``plots.redraw`` and, for peers, ``peers_trees.json`` and ``peers/<name>.log``.
"""

from __future__ import annotations

import math
import os
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from foldexp.bench.grid import Cell, Record
from foldexp.bench.markdown import render
from foldexp.bench.results import CSV_NAME, table1_summary, throughput_summary, to_frame
from foldexp.bench.schema import check_bench_config
from foldexp.bench.timing import setup_env
from foldexp.config import enum_value
from foldexp.config.errors import ConfigError
from foldexp.config.settings import ComposedConfig, DeviceSettings, config_yaml, settings
from foldexp.data.cells import spreadsheet_frame
from foldexp.executor import resolve_compile_mode, set_compile_mode
from foldexp.kernels import configure_kernels, keep_freed_memory

__all__ = ["BenchRun", "run_bench", "summarize"]


@dataclass(frozen=True)
class BenchRun:
    """A bench run's settings, made once from the composed config by ``run_bench``."""

    seed: int
    bench: Any  # the frozen ``BenchConfig`` (its sections: their schemas' instances)
    device: DeviceSettings
    output_dir: str
    config_yaml: str  # the composed config as ``bench_config.yaml`` keeps it

    @classmethod
    def of(cls, cfg: ComposedConfig) -> BenchRun:
        return cls(
            seed=int(cfg.seed),
            bench=settings(cfg.bench),
            device=settings(cfg.device),
            output_dir=str(cfg.paths.output_dir),
            config_yaml=config_yaml(cfg),
        )


def _cells(cfg: BenchRun, env: Any, out_dir: Path) -> list[Cell]:
    bench, seed = cfg.bench, int(cfg.seed)
    cells: list[Cell] = []
    for exp in bench.experiments:
        exp = enum_value(exp)
        if exp == "table1":
            from foldexp.bench.table1 import table1_cells

            cells += table1_cells(bench, env, seed)
        elif exp == "scaling":
            from foldexp.bench.scaling import scaling_cells

            cells += scaling_cells(bench, env, seed)
        elif exp == "peers":
            from foldexp.bench.peers import peer_cells

            cells += peer_cells(bench, env, seed, out_dir, cfg.device)
        elif exp == "dynet_tasks":
            from foldexp.bench.dynet_tasks import dynet_task_cells

            cells += dynet_task_cells(bench, env, seed)
    return cells


def run_bench(composed: ComposedConfig) -> pd.DataFrame:
    """Runs the grid of ``bench`` and returns the tidy frame it also wrote to CSV; a value
    outside its range fails first (``check_bench_config``), before anything is timed. The
    composed config is read here, once (``BenchRun.of``)."""
    from tqdm import tqdm

    check_bench_config(composed)
    cfg = BenchRun.of(composed)

    out_dir = Path(cfg.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    seed = int(cfg.seed)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    env = setup_env(enum_value(cfg.device.name), cfg.device.threads)
    try:
        configure_kernels(cfg.device.onednn, cfg.device.fused_cells, cfg.device.flush_denormal)
    except RuntimeError as err:  # device.fused_cells=true where the kernels cannot be built
        raise ConfigError(str(err)) from None
    setting = enum_value(cfg.device.compile) if cfg.device.compile is not None else None
    set_compile_mode(resolve_compile_mode(setting, enum_value(cfg.device.name)))
    if cfg.device.keep_memory:
        keep_freed_memory()
    (out_dir / "bench_config.yaml").write_text(cfg.config_yaml)
    cells = _cells(cfg, env, out_dir)
    quiet = not (cfg.bench.progress and sys.stderr.isatty())
    records: list[Record] = []
    t0 = time.perf_counter()
    bar = tqdm(cells, desc="bench", unit="cell", disable=quiet, dynamic_ncols=True)
    for cell in bar:
        bar.set_postfix_str(cell.label)
        records += cell.run()
    defaults = {**env.fields(), "preset": cfg.bench.name, "seed": seed, "note": ""}
    df = to_frame(records, defaults)
    spreadsheet_frame(df).to_csv(out_dir / CSV_NAME, index=False)
    summary = summarize(df, time.perf_counter() - t0)
    (out_dir / "bench.md").write_text(render(df, summary) + "\n")
    if cfg.bench.plots:
        from foldexp.bench.plots import redraw

        redraw(out_dir)
    print(summary)
    print(f"results: {out_dir / CSV_NAME}, {out_dir / 'bench.md'}")
    return df


def _x(v: float) -> str:
    return "n/a" if v is None or math.isnan(v) else f"{v:.2f}"


def summarize(df: pd.DataFrame, seconds: float | None = None) -> str:
    """One paragraph with the headline numbers of whatever experiments the frame holds."""
    r0 = df.iloc[0]
    parts = [
        f"foldexp bench ({r0['preset']}; {r0['device']}, {int(r0['threads'])} threads, "
        f"torch {r0['torch']}" + (f"; {seconds:.0f} s" if seconds is not None else "") + "):"
    ]
    for mode in dict.fromkeys(df.loc[df["experiment"] == "table1", "mode"]):
        t = table1_summary(df, mode)
        big = t[t.index >= 128] if (t.index >= 128).any() else t.iloc[:1]
        bmax = int(t.index.max())
        parts.append(
            f"Table 1 {mode}: cost ratio (dynamic/manual) {_x(big['cost_ratio'].min())}–"
            f"{_x(big['cost_ratio'].max())} and full dynamic/manual {_x(big['full_ratio'].min())}"
            f"–{_x(big['full_ratio'].max())} at batch ≥ {int(big.index.min())}, per-repeat "
            f"(paired) medians {_x(big['cost_ratio_paired'].min())}–"
            f"{_x(big['cost_ratio_paired'].max())} and {_x(big['full_ratio_paired'].min())}–"
            f"{_x(big['full_ratio_paired'].max())} (paper CPU "
            f"1.18–1.30); speedup ratio {_x(t.loc[bmax, 'speedup_ratio'])} at batch {bmax} "
            f"(vs the paper's per-node manual at batch 1: {_x(t.loc[bmax, 'speedup_node'])}; "
            f"paper CPU 28.86 at 1024); schedule building "
            f"{100 * t.loc[bmax, 'schedule_share']:.0f}% of a full-dynamic step at batch {bmax} "
            f"({100 * t.loc[bmax, 'schedule_cached_share']:.0f}% with per-input traces cached)."
        )
        if 1 in t.index:
            one = t.loc[1, "dynamic_tree"] / t.loc[1, "manual_tree"]
            parts.append(f"At batch 1 the engine takes {_x(one)}x the manual time per tree "
                         "(paper CPU 0.49).")  # fmt: skip
    sc = df[df["experiment"] == "scaling"]
    if not sc.empty:
        top = sc[sc["size"] == sc["size"].max()].groupby("shape")[["calls", "depth", "nodes"]].max()
        desc = ", ".join(
            f"{s} {int(r.calls)} launches for depth {int(r.depth)} ({int(r.nodes)} nodes)"
            for s, r in top.iterrows()
        )
        parts.append(f"Scaling at {int(sc['size'].max())} leaves: {desc}.")
    if (df["experiment"] == "peers").any():
        t = throughput_summary(df, "peers").set_index("column")
        if "engine" in t.index and t.loc["engine", "per_s"] == t.loc["engine", "per_s"]:
            eng = float(t.loc["engine", "per_s"])
            others = [
                f"{c} {eng / r.per_s:.1f}x" for c, r in t.iterrows()
                if c != "engine" and r.per_s == r.per_s
            ]  # fmt: skip
            parts.append(
                f"Peers: the engine trains {eng:,.0f} trees/s, faster than each by: "
                + ", ".join(others)
                + "."
            )
        skipped = [f"{c} ({r.note})" for c, r in t.iterrows() if r.per_s != r.per_s]
        if skipped:
            parts.append("Skipped: " + "; ".join(skipped) + ".")
    if (df["experiment"] == "dynet_tasks").any():
        from foldexp.bench.published import DYNET_TABLE2

        t = throughput_summary(df, "dynet_tasks")
        desc = []
        for _, r in t.iterrows():
            ref = DYNET_TABLE2.get(r["column"], (None,))[0]
            vs = f" (DyNet C++ {ref:g})" if ref else ""
            desc.append(f"{r['column']}@{int(r['batch_size'])} {r['per_s']:,.0f} {r['unit']}/s{vs}")
        parts.append("DyNet tasks: " + "; ".join(desc) + ".")
    load, cpus, threads = df["load"].median(), os.cpu_count() or 1, int(r0["threads"])
    if load == load and load - threads > 1 and threads > 1:  # others ran beside our threads
        parts.append(
            f"Warning: the machine was busy (median 1-min load {load:.1f} on {cpus} CPUs); "
            f"with {int(r0['threads'])} threads each small op waits for descheduled OpenMP "
            "threads, which can inflate times many-fold. Rerun when idle or with device.threads=1."
        )
    return " ".join(parts)
