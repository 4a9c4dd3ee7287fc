"""Running a kept plan again without gradients: its buffers and gathered arguments reused.

A plan served from the compiler's plan cache (a repeated request) is run again and again. Run
fresh, each run allocates its buffers, copies the constants in, gathers every group's arguments
into new tensors, splits them and writes each output through slice indexing: on a 40-node tree
that is about a fifth of the run (``benchmarks/single_tree_latency.py``). From its second run
without gradients, a plan whose buffers are small (``MAX_BYTES``) is run by a ``Replay``
instead: buffers with the constants already in place, each gather read into a block it keeps
(``index_select(out=)``), the arguments as fixed views of it, and each output copied into a
fixed view of its rows.

Safety. A replay is used by one run at a time: runs take it from the plan's pool and give it
back, so threads serving the same plan each get their own. What a run returns is always copied
out of the buffers (``calls.outputs``), so a later run never changes an earlier result. The
constants are copied in again at every run, as a fresh run does, so an op that changes its
arguments in place changes nothing the next run reads. Ops see the same kind of arguments as a
fresh run (views of buffer rows, or gathered blocks). A forward hook (or pre-hook) on a module
of an op (one it holds, or a frozen one its plain function calls), or on every module, may keep
the arguments it is shown, as feature extraction does: while one is registered the plan runs
fresh (``Op.has_forward_hooks``). An op that keeps a reference to its arguments
between calls by other means would see them rewritten, as it would see any reused workspace.
Replays are CPU only: on CUDA a replay given back when the host is done could be taken by
another stream while this one's kernels still read its buffers, which the caching allocator
guards fresh runs against. Pools are kept apart by inference mode, whose tensors cannot be
written outside it.

The replays live in ``Plan.reuse`` (shared by the plan cache's shallow copies, never pickled)
and refer to neither the plan nor its ops, so they go with the plan, without the cyclic
collector's help.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from foldexp.blocks.internal import Op
from foldexp.compiler.schedule import Plan
from foldexp.executor.calls import allocate, call_op, dense_route, outputs

__all__ = ["MAX_BYTES", "Replay", "plan_bytes", "run_kept"]

# A kept replay holds its buffers for as long as the plan stays cached (64 plans at most, by
# default); the per-call costs it saves matter for small batches, where they are a large share.
MAX_BYTES = 1 << 20

_CPU = torch.device("cpu")


class Replay:
    """A plan's buffers, and each group's reads, arguments and output rows."""

    def __init__(self, plan: Plan, arity: Sequence[int]) -> None:
        self.bufs = allocate(plan, _CPU)
        self.constants = [
            (buf[: len(const)], const)
            for buf, const in zip(self.bufs, plan.constants)
            if const is not None
        ]
        self.steps: list[tuple[int, list[tuple[Any, ...]], list[Any], list[torch.Tensor]]] = []
        for g in plan.groups:
            gathers: list[tuple[Any, ...]] = []
            args: list[Any] = [None] * arity[g.op]
            for ga in g.gathers:
                buf = self.bufs[ga.tid]
                if isinstance(ga.rows, slice):
                    block = buf[ga.rows]
                else:
                    block = buf.new_empty((len(ga.rows), *buf.shape[1:]))
                    gathers.append((buf, ga.rows, block))
                if len(ga.positions) == 1:
                    args[ga.positions[0]] = block
                    continue
                parts = block.split_with_sizes([g.count] * len(ga.positions))
                for pos, part in zip(ga.positions, parts):
                    args[pos] = part
            rows = [self.bufs[tid][start:end] for tid, start, end in g.outs]
            self.steps.append((g.op, gathers, args, rows))

    def run(self, plan: Plan, ops: Sequence[Op]) -> list[torch.Tensor]:
        """The plan's outputs, as ``execute`` returns them without gradients."""
        for rows, const in self.constants:
            rows.copy_(const)
        with dense_route(_CPU):
            for i, gathers, args, rows in self.steps:
                for buf, index, block in gathers:
                    torch.index_select(buf, 0, index, out=block)
                # A fresh list: the op may change the one it is given.
                for row, out in zip(rows, call_op(ops[i], list(args))):
                    try:
                        row.copy_(out)
                    except (RuntimeError, TypeError):  # what only slice assignment takes:
                        row[...] = out  # (1, n) into n rows
        return outputs(plan, self.bufs)


def run_kept(plan: Plan, ops: Sequence[Op], device: torch.device) -> list[torch.Tensor] | None:
    """The plan's outputs, run by one of its replays (taken from the plan's pool and given
    back), or ``None`` where the plan is to be run fresh: gradients on, not on CPU, a forward
    hook on a module of an op, its first run, or a large plan."""
    state = plan.reuse
    if torch.is_grad_enabled() or device.type != "cpu" or state.get("too_large"):
        return None
    used = state.get("ops")
    if used is None:
        used = state["ops"] = sorted({g.op for g in plan.groups})
    for i in used:
        if ops[i].has_forward_hooks():  # it may keep arguments that a replay would rewrite
            return None
    if not state.get("ran"):
        state["ran"] = True
        return None
    pools: dict[bool, list[Replay]] = state.setdefault("pools", {})
    pool = pools.setdefault(torch.is_inference_mode_enabled(), [])
    try:
        replay = pool.pop()  # atomic: two threads never get the same replay
    except IndexError:
        if plan_bytes(plan) > MAX_BYTES:
            state["too_large"] = True
            return None
        replay = Replay(plan, [len(op.in_types) for op in ops])
    try:
        return replay.run(plan, ops)
    finally:
        pool.append(replay)


def plan_bytes(plan: Plan) -> int:
    """The bytes a replay of ``plan`` holds: its buffers and its gathered blocks."""
    row_bytes = [math.prod(t.shape) * t.dtype.itemsize for t in plan.types]
    total = sum(n * b for n, b in zip(plan.rows_per_type, row_bytes))
    for g in plan.groups:
        for ga in g.gathers:
            if not isinstance(ga.rows, slice):
                total += len(ga.rows) * row_bytes[ga.tid]
    return total
