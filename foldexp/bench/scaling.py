"""Scaling: engine time and operation launches per batch vs tree size, for three tree shapes.

Dynamic batching launches each operation once per depth, not once per node (the paper's
§2.1: "the number of kernel invocations is log(n), rather than n"). For balanced trees the
launches must grow like ``log2(leaves)``, for random trees like their depth (about
``2·sqrt(pi·n)``), for chains (sequences) linearly -- while nodes grow linearly in all three.
Each cell records the launches, the depth and the node count next to the times.

The engine traces inputs recursively, a few Python frames per tree level, so deep chains need a
higher recursion limit than Python's default 1000; it is raised for this experiment only.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

import torch

from foldexp import Compiler
from foldexp.bench.grid import Cell, Record
from foldexp.bench.table1_model import PaperTreeModel
from foldexp.bench.timing import Case, Env, Stopwatch, run_interleaved
from foldexp.bench.trees import SHAPES, make_trees
from foldexp.config import enum_value

__all__ = ["scaling_cells", "recursion_limit"]

FRAMES_PER_LEVEL = 10  # generous: the engine's trace uses about five frames per tree level


@contextlib.contextmanager
def recursion_limit(limit: int) -> Iterator[None]:
    """Raises Python's recursion limit to at least ``limit`` inside the block."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, limit))
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


def scaling_cells(bench: Any, env: Env, seed: int) -> list[Cell]:
    """One cell per (mode, shape, tree size)."""
    sc = bench.scaling
    for shape in sc.shapes:
        if shape not in SHAPES:
            raise ValueError(f"bench.scaling.shapes: unknown shape {shape!r}; one of {SHAPES}")
    torch.manual_seed(seed)
    model = PaperTreeModel(bench.vocab_size, sc.state_size).to(env.device)
    compiler = Compiler(model.block(), merge_duplicates=False)  # as Table 1: every node computed
    cells = []
    for mode in sc.modes:
        mode = enum_value(mode)
        for shape in sc.shapes:
            for leaves in sc.leaves:
                run = _runner(model, compiler, bench, env, mode, shape, leaves, seed)
                cells.append(Cell(f"scaling {mode} {shape} n={leaves}", run))
    return cells


def _runner(
    model: PaperTreeModel,
    compiler: Compiler,
    bench: Any,
    env: Env,
    mode: str,
    shape: str,
    leaves: int,
    seed: int,
) -> Callable[[], list[Record]]:
    sc = bench.scaling
    training = mode == "training"

    def run() -> list[Record]:
        trees = make_trees(sc.batch_size, leaves, bench.vocab_size, seed + leaves, shape)
        extra: dict[str, Any] = {}

        def step(sw: Stopwatch) -> None:
            model.zero_grad(set_to_none=True)
            with sw("schedule"):
                plan = compiler.build(trees)
            with sw("execute"), contextlib.nullcontext() if training else torch.no_grad():
                out = compiler.run(plan)
                if training:
                    (0.5 * out.pow(2).sum()).backward()
            extra.update(calls=plan.num_calls, depth=plan.max_depth, nodes=plan.num_nodes)

        with recursion_limit(FRAMES_PER_LEVEL * leaves + 1000):
            records = run_interleaved(
                [Case("engine", step, extra)],
                env.device,
                bench.warmup,
                bench.repeats,
                bench.budget_s,
                bench.min_repeats,
            )
        for r in records:
            r.update(
                experiment="scaling",
                mode=mode,
                batch_size=sc.batch_size,
                items=sc.batch_size,
                unit="trees",
                size=leaves,
                shape=shape,
                state_size=sc.state_size,
            )
        return records

    return run
