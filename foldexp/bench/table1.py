"""Table 1 of the Fold paper (§2.1): manual vs dynamic vs full dynamic batching, per batch size.

For each mode (inference under ``torch.no_grad``, or training: forward, ``l2_loss``, backward)
and each batch size, three cases are timed side by side (``timing.run_interleaved``):

- ``manual``: ``PaperTreeModel.manual_level`` (or ``manual_node``) on identical-shape trees, the
  shape's level structure computed once beforehand, as a static graph would be;
- ``dynamic``: the engine on those same trees; ``Compiler.build`` is timed as
  ``schedule_dynamic`` and ``Compiler.run`` (plus the backward) as ``dynamic``;
- ``full_dynamic``: the engine on random trees of the same size, every shape different;
  ``schedule_full_dynamic`` and ``full_dynamic`` likewise, and ``schedule_cached_full_dynamic``
  the same batch built by a compiler that keeps per-input traces (``cache_traces``, as every
  model of ``foldexp.models`` does; plans are not kept, so it schedules every time): what
  building costs from the second epoch over a dataset on;
- at batch size 1 only, ``manual_node``: one op per node, the paper's baseline, so the paper's
  speedup ratio (``speedup_node``) can be computed beside ours (``speedup_ratio``, whose
  batch-1 manual time already batches each level of the tree).

As in the paper, the table's time columns exclude schedule building (TF Fold's ``feed_dict``
construction was timed apart); the schedule columns report it so nobody has to guess.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from foldexp import Compiler
from foldexp.bench.grid import Cell, Record
from foldexp.bench.table1_model import PaperTreeModel, leaf_words
from foldexp.bench.timing import Case, Env, Stopwatch, repeats_for, run_interleaved
from foldexp.bench.trees import levels_of, make_tree, make_trees, same_shape_trees
from foldexp.config import enum_value

__all__ = ["table1_cases", "table1_cells", "COLUMNS"]

COLUMNS = (
    "manual",
    "dynamic",
    "full_dynamic",
    "schedule_dynamic",
    "schedule_full_dynamic",
    "schedule_cached_full_dynamic",
    "manual_node",
)


def _l2_loss(out: torch.Tensor) -> torch.Tensor:
    return 0.5 * out.pow(2).sum()  # TF's l2_loss, as the Fold benchmark trains with


def table1_cases(
    model: PaperTreeModel,
    compiler: Compiler,
    bench: Any,
    env: Env,
    batch: int,
    training: bool,
    seed: int,
    cached: Compiler | None = None,
) -> list[Case]:
    """The cases of one batch size (plus ``manual_node`` at batch 1), on trees from ``seed``;
    ``cached`` (a compiler keeping per-input traces) also builds the full-dynamic batch."""
    rng = np.random.default_rng(seed)
    template = make_tree(bench.leaves, bench.vocab_size, rng, "random")
    levels = levels_of(template)
    same = same_shape_trees(template, batch, bench.vocab_size, seed + 1)
    full = make_trees(batch, bench.leaves, bench.vocab_size, seed + 2)
    words = leaf_words(same).to(env.device)
    manual = model.manual_node if bench.manual == "node" else model.manual_level
    grad: Callable[[], Any] = contextlib.nullcontext if training else torch.no_grad

    def finish(out: torch.Tensor) -> None:
        if training:
            _l2_loss(out).backward()

    def manual_step(sw: Stopwatch) -> None:
        model.zero_grad(set_to_none=True)
        with sw("manual"), grad():
            finish(manual(levels, words))

    def engine_step(
        trees: list, column: str, extra: dict[str, Any], cached: Compiler | None = None
    ) -> Callable[..., None]:
        def step(sw: Stopwatch) -> None:
            model.zero_grad(set_to_none=True)
            if cached is not None:
                with sw(f"schedule_cached_{column}"):
                    cached.build(trees)
            with sw(f"schedule_{column}"):
                plan = compiler.build(trees)
            with sw(column), grad():
                finish(compiler.run(plan))
            extra.update(calls=plan.num_calls, depth=plan.max_depth, nodes=plan.num_nodes)

        return step

    # launches of the cell op: one per level, or one per node (leaves: one, or one each)
    manual_calls = levels.num_nodes if bench.manual == "node" else levels.depth + 1
    dyn_extra: dict[str, Any] = {}
    full_extra: dict[str, Any] = {}
    if cached is not None:
        cached.build(full)  # its traces kept before any timing, even if warm-up uses other trees
    cases = [
        Case("manual", manual_step, {"calls": manual_calls, "depth": levels.depth + 1}),
        Case("dynamic", engine_step(same, "dynamic", dyn_extra), dyn_extra),
        Case("full_dynamic", engine_step(full, "full_dynamic", full_extra, cached), full_extra),
    ]
    if batch == 1 and bench.manual != "node":
        # The paper's own baseline (one op per node) at batch 1: its speedup ratio's numerator.
        def node_step(sw: Stopwatch) -> None:
            model.zero_grad(set_to_none=True)
            with sw("manual_node"), grad():
                finish(model.manual_node(levels, words))

        cases.append(Case("manual_node", node_step, {"calls": levels.num_nodes}))
    return cases


def table1_cells(bench: Any, env: Env, seed: int) -> list[Cell]:
    """One cell per (mode, batch size); the model is built once and shared by all cells."""
    torch.manual_seed(seed)
    model = PaperTreeModel(bench.vocab_size, bench.state_size).to(env.device)
    # The paper's comparison: the same arithmetic on both sides, so equal invocations (leaves
    # of the same word, and subtrees over them) are not merged here.
    compiler = Compiler(model.block(), merge_duplicates=False)
    cached = Compiler(model.block(), merge_duplicates=False, cache_traces=True, cache_plans=False)
    cells = []
    for mode in bench.modes:
        mode = enum_value(mode)
        training = mode == "training"
        sizes = (
            list(bench.train_batch_sizes or bench.batch_sizes) if training else bench.batch_sizes
        )
        for batch in sizes:
            cells.append(
                Cell(
                    f"table1 {mode} b={batch}",
                    _runner(model, (compiler, cached), bench, env, batch, training, seed, mode),
                )
            )
    return cells


def _runner(
    model: PaperTreeModel,
    compilers: tuple[Compiler, Compiler],  # building anew, and keeping per-input traces
    bench: Any,
    env: Env,
    batch: int,
    training: bool,
    seed: int,
    mode: str,
) -> Callable[[], list[Record]]:
    def run() -> list[Record]:
        compiler, cached = compilers
        cases = table1_cases(model, compiler, bench, env, batch, training, seed + batch, cached)
        warm_batch = min(batch, bench.warmup_trees) if bench.warmup_trees > 0 else batch
        if bench.warmup > 0 and warm_batch < batch:
            # Warm up on a smaller batch: same kernels and thread pool, a fraction of the time.
            warm = table1_cases(model, compiler, bench, env, warm_batch, training, seed, cached)
            run_interleaved(warm, env.device, 0, bench.warmup)
            warmup = 0
        else:
            warmup = bench.warmup
        records = run_interleaved(
            cases,
            env.device,
            warmup,
            repeats_for(batch, bench.repeats, bench.boost_below),
            bench.budget_s,
            bench.min_repeats,
        )
        for r in records:
            r.update(
                experiment="table1",
                mode=mode,
                batch_size=batch,
                items=batch,
                unit="trees",
                size=bench.leaves,
                shape="random",
                state_size=bench.state_size,
            )
        return records

    return run
