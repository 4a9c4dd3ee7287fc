"""The executor's primitives: a plan's buffers, reading rows from them, and calling an op.

Each tensor type of a plan has one buffer holding every value of that type in the batch
(constants first, then each group's outputs); a group reads its arguments from them and its
outputs are written into its reserved rows. ``run.py`` (a plan run once, with or without
gradients) and ``replay.py`` (a kept plan run again) share these.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from typing import Any

import torch

from foldexp.blocks.internal import Op
from foldexp.compiler.schedule import Gather, Group, Index, Plan
from foldexp.kernels import fused_cells_enabled, routed_linears
from foldexp.kernels.pointwise_graph import PointwiseFusion
from foldexp.kernels.scatter import NATIVE_ELEMENTS

__all__ = [
    "allocate",
    "arguments",
    "call_op",
    "copy_rows",
    "dense_route",
    "on_device",
    "outputs",
    "read",
    "write_outputs",
]


fusions: weakref.WeakKeyDictionary[Op, PointwiseFusion] = weakref.WeakKeyDictionary()


def call_op(op: Op, args: list[Any]) -> list[Any]:
    """``op.forward(args)``, with each run of pointwise ops in the op's body (a user's own cell
    written with plain torch ops) as one generated kernel (``kernels/pointwise_graph.py``), as
    long as foldexp's C++ kernels are on (``device.fused_cells``)."""
    if not fused_cells_enabled():
        return op.forward(args)
    parts = getattr(op, "parts", None)  # a FusedOp: its ops one after the other
    if parts is not None:
        for part in parts:
            args = call_op(part, args)
        return args
    # Kept in the op's ``runtime`` (a weak dictionary's lookup makes a weak reference at every
    # call) and listed in ``fusions`` for whoever wants to see them all.
    fusion = op.runtime.get("fusion")
    if fusion is None:
        fusion = op.runtime["fusion"] = fusions[op] = PointwiseFusion([op.fn, op.module])
    if fusion.unfusable:
        return op.forward(args)
    return fusion(lambda *xs: op.forward(list(xs)), args)


def read(buf: torch.Tensor, rows: Index) -> torch.Tensor:
    """Rows of a buffer: a view for a contiguous range, else a gathered copy."""
    return buf[rows] if isinstance(rows, slice) else buf.index_select(0, rows)


def write_outputs(
    bufs: list[torch.Tensor], rows: list[tuple[int, int, int]], outs: Sequence[Any]
) -> None:
    """Writes a group's outputs into their reserved rows ``(tid, start, end)``.

    Outputs that match their rows exactly (shape, dtype, device: a Tree-LSTM's ``h`` and ``c``)
    go in one ``_foreach_copy_``: on CUDA one multi-tensor kernel instead of a copy per output
    (the peers' step: 18 launches fewer). Anything else (a ``(1, n)`` output broadcast over its
    rows, a Python number, another dtype) is assigned row block by row block, as always."""
    dsts = [bufs[tid][start:end] for tid, start, end in rows]
    if len(outs) == len(dsts) > 1 and all(
        isinstance(o, torch.Tensor)
        and o.shape == d.shape
        and o.dtype == d.dtype
        and o.device == d.device
        for o, d in zip(outs, dsts)
    ):
        torch._foreach_copy_(dsts, list(outs))
        return
    for dst, out in zip(dsts, outs):
        dst[...] = out


def copy_rows(
    bufs: list[torch.Tensor], rows: list[tuple[int, int, int]], outs: Sequence[torch.Tensor]
) -> None:
    """``write_outputs`` for outputs known to match their rows (shape, dtype and device: a
    capture's, checked when it was made), without checking them again."""
    if len(outs) == 1:
        tid, start, end = rows[0]
        bufs[tid][start:end].copy_(outs[0])
        return
    torch._foreach_copy_([bufs[tid][start:end] for tid, start, end in rows], outs)


def on_device(plan: Plan, device: torch.device) -> Plan:
    """A copy of ``plan`` whose row indices live on ``device`` (constants move when buffers
    are made).

    Every index array goes in one host-to-device copy, from pinned memory where there is an
    accelerator to pin for, without waiting for it: one transfer per plan instead of one per
    gather, and the device's views of it. The copy is kept in the plan's ``reuse`` (a plan run
    again, an evaluation split, a served batch, uploads nothing)."""
    if device.type == "cpu":
        return plan
    kept = plan.reuse.get("on_device")
    if kept is not None and kept[0] == device:
        return kept[1]
    host = [
        rows
        for rows in (
            *(ga.rows for g in plan.groups for ga in g.gathers),
            *(r for _, r in plan.outputs),
            *(r for _, r, _ in plan.metrics.values()),
        )
        if isinstance(rows, torch.Tensor)
    ]
    moved = iter(_upload(host, device))

    def move(rows: Index) -> Index:
        return rows if isinstance(rows, slice) else next(moved)

    # The same order as ``host`` above: gathers, then outputs, then metrics.
    groups = [
        Group(
            g.op,
            g.depth,
            g.count,
            [Gather(ga.tid, move(ga.rows), ga.positions) for ga in g.gathers],
            g.outs,
            g.merged,
        )
        for g in plan.groups
    ]
    outs = [(t, move(r)) for t, r in plan.outputs]
    metrics = {k: (t, move(r), i) for k, (t, r, i) in plan.metrics.items()}
    moved_plan = replace(plan, groups=groups, outputs=outs, metrics=metrics)
    plan.reuse["on_device"] = (device, moved_plan)
    return moved_plan


def _upload(tensors: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
    """``tensors`` (int64 row indices) on ``device``, in one copy; views of one device
    tensor."""
    if not tensors:
        return []
    flat = torch.cat([t.reshape(-1) for t in tensors])
    if torch.cuda.is_available() and device.type == "cuda":
        flat = flat.pin_memory()  # a non-blocking copy from pageable memory would wait
    on_device = flat.to(device, non_blocking=True)
    return [
        part.view(t.shape)
        for part, t in zip(on_device.split([t.numel() for t in tensors]), tensors)
    ]


def allocate(plan: Plan, device: torch.device) -> list[torch.Tensor]:
    """The plan's buffers on ``device``, one per tensor type, constants in their first rows."""
    bufs = []
    for t, n, const in zip(plan.types, plan.rows_per_type, plan.constants):
        buf = torch.empty((n, *t.shape), dtype=t.dtype, device=device)
        if const is not None:
            buf[: len(const)] = const.to(device, non_blocking=True)
        bufs.append(buf)
    return bufs


def outputs(plan: Plan, bufs: list[torch.Tensor]) -> list[torch.Tensor]:
    """The plan's output components, then its metrics, as tensors of their own (a contiguous
    range is copied out, so nothing returned shares memory with a buffer)."""
    outs = [read(bufs[tid], rows) for tid, rows in plan.outputs]
    outs += [read(bufs[tid], rows) for tid, rows, _ in plan.metrics.values()]
    return [o.clone() if o._base is not None else o for o in outs]


def dense_route(device: torch.device) -> AbstractContextManager:
    """Where ops run: on CPU under ``routed_linears()``, so a user's plain ``nn.Linear`` takes
    foldexp's dense route as its own ``Linear`` does."""
    return routed_linears() if device.type == "cpu" else nullcontext()


def arguments(
    op: Op,
    group: Group,
    bufs: list[torch.Tensor],
    leaves: list[torch.Tensor] | None = None,
    spans: list[int] | None = None,
) -> list[Any]:
    """The group's arguments, read from the buffers. With ``leaves`` and ``spans`` (training),
    float arguments are fresh autograd leaves, appended to ``leaves`` gather by gather; ``spans``
    gets each gather's count of them.

    A large gather's arguments are each their own leaf: the gathered block's backward would
    concatenate their gradients only to scatter them again (peers step: 2.2 ms), and
    ``index_add_parts`` adds them where they lie in one pass. A small one (below
    ``NATIVE_ELEMENTS``) is one leaf, split: there the concatenation is cheaper than a leaf
    per argument (SST step: 0.3 ms; on an H200, a leaf per argument and a Triton scatter made
    SST's epoch 1.4 s slower)."""
    args: list[Any] = [None] * len(op.in_types)
    for ga in group.gathers:
        x = read(bufs[ga.tid], ga.rows)
        grad = leaves is not None and x.dtype.is_floating_point
        if leaves is not None and isinstance(ga.rows, slice):
            # A view would share the buffer's version counter: later writes into the buffer
            # would then fail autograd's check on this saved input (even integer ids an
            # embedding saves), so the graph gets its own copy.
            x = x.clone()
        separate = grad and len(ga.positions) > 1 and x.numel() >= NATIVE_ELEMENTS
        if grad and not separate:
            leaves.append(x.requires_grad_())  # type: ignore[union-attr]
        if spans is not None:
            spans.append(len(ga.positions) if separate else int(grad))
        if len(ga.positions) == 1:
            args[ga.positions[0]] = x
            continue
        # split_with_sizes is torch's own binding; Tensor.split's Python wrapper costs another
        # 3 µs a call, which a 40-node tree's 9 calls feel.
        parts = x.split_with_sizes([group.count] * len(ga.positions))
        for pos, part in zip(ga.positions, parts):
            if separate:
                part = part.detach().requires_grad_()
                leaves.append(part)  # type: ignore[union-attr]
            args[pos] = part
    return args
