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
out of the buffers (``calls.outputs``), so a later run never changes an earlier result. Ops see
the same kind of arguments as a fresh run (views of buffer rows, or gathered blocks); an op that
keeps a reference to its arguments between calls would see them rewritten, as it would see any
reused workspace.

The replays live in ``Plan.reuse`` (shared by the plan cache's shallow copies, never pickled),
so they go when the plan leaves the cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from foldexp.blocks.internal import Op
from foldexp.compiler.schedule import Plan
from foldexp.executor.calls import allocate, call_op, dense_route, outputs

__all__ = ["MAX_BYTES", "Replay", "take_replay"]

# A kept replay holds its buffers for as long as the plan stays cached (64 plans at most, by
# default); the per-call costs it saves matter for small batches, where they are a large share.
MAX_BYTES = 1 << 20


class Replay:
    """A plan's buffers on one device, and each group's reads, arguments and output rows."""

    def __init__(
        self, plan: Plan, ops: Sequence[Op], device: torch.device, pool: list[Replay]
    ) -> None:
        self.plan, self.ops, self.device, self.pool = plan, ops, device, pool
        self.bufs = allocate(plan, device)
        self.steps: list[tuple[Op, list[tuple[Any, ...]], list[Any], list[torch.Tensor]]] = []
        for g in plan.groups:
            gathers: list[tuple[Any, ...]] = []
            args: list[Any] = [None] * len(ops[g.op].in_types)
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
            self.steps.append((ops[g.op], gathers, args, rows))

    @property
    def nbytes(self) -> int:
        blocks = [b for _, gathers, _, _ in self.steps for _, _, b in gathers]
        return sum(t.numel() * t.element_size() for t in [*self.bufs, *blocks])

    def run(self) -> list[torch.Tensor]:
        """The plan's outputs, as ``execute`` returns them without gradients; the replay goes
        back to its pool at the end."""
        try:
            with dense_route(self.device):
                for op, gathers, args, rows in self.steps:
                    for buf, index, block in gathers:
                        torch.index_select(buf, 0, index, out=block)
                    # A fresh list: the op may change the one it is given.
                    for row, out in zip(rows, call_op(op, list(args))):
                        row.copy_(out)
            return outputs(self.plan, self.bufs)
        finally:
            self.pool.append(self)


def take_replay(plan: Plan, ops: Sequence[Op], device: torch.device) -> Replay | None:
    """A replay of ``plan`` to run now (it goes back to the plan's pool when its run ends), or
    ``None`` where the plan is run fresh: gradients on, its first run, or a large plan."""
    state = plan.reuse
    if torch.is_grad_enabled() or state.get("too_large"):
        return None
    if not state.get("ran"):
        state["ran"] = True
        return None
    pool: list[Replay] = state.setdefault("pool", [])
    try:
        replay = pool.pop()  # atomic: two threads never get the same replay
    except IndexError:
        replay = Replay(plan, ops, device, pool)
        if replay.nbytes > MAX_BYTES:
            state["too_large"] = True
            return None
    if replay.device != device or not _same(replay.ops, ops):
        return None  # another device or op list than it was made for: dropped, run fresh
    return replay


def _same(a: Sequence[Op], b: Sequence[Op]) -> bool:
    return a is b or (len(a) == len(b) and all(x is y for x, y in zip(a, b)))
