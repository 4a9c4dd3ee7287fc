"""The tape: a training sweep's groups run through their ops' captured graphs.

A differentiable sweep (``run.py``) is one ``autograd.Function``. With ``device.compile`` on
(``graphs`` or ``inductor``), each group whose op has a capture (``capture.py``) runs as

    gather → captured forward (no autograd) → write the rows

and pushes a ``TapeRecord`` (the capture and what its backward saved). Each gather's rows go in
as one block: ``k`` arguments of one type read together as a ``(k, n, ...)`` view, split inside
the graph, so that the backward hands back one gradient block per gather (Inductor writes the
parts into it where they are computed) instead of ``k`` parts to concatenate before their rows
are added. The sweep's backward walks the records deepest first: the output rows' gradients go
into the captured backward, whose gather gradients are added into their rows (one ``index_add_``
a gather, a slice ``add_``) and whose parameter gradients are summed and returned through
autograd (so DDP's hooks and optimizers see them as always). No group keeps an autograd graph
and the engine runs once per step, for the whole sweep: on a host-bound step that is most of the
time the per-group route spends (``docs/PERFORMANCE.md``).

Groups of an op the tape refused (``capture.refusal``) run the per-group autograd route inside
the same sweep, so a model mixes both freely.

Randomness. A captured dropout draws from torch's generator as the eager body does (the graphs'
``bernoulli``), so a seed repeats a run; under ``inductor`` the compiled kernels draw from
Inductor's own stream, seeded from torch's: repeatable, but not the eager draws. A capture is
made with the generator's state saved and restored, so a first step draws what later ones do.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from foldexp.blocks.internal import Op
from foldexp.compiler.schedule import Group, Plan
from foldexp.executor.calls import copy_rows, read, write_outputs
from foldexp.executor.capture import Captured, captured
from foldexp.kernels.scatter import index_add_parts

__all__ = ["TapeRecord", "add_rows", "gather_layouts", "tape_backward", "tape_forward"]


@dataclass
class TapeRecord:
    """One captured group's forward: the capture and the tensors and sizes its backward takes."""

    cap: Captured
    saved: Sequence[Any]


def tape_forward(
    op: Op,
    group: Group,
    layout: tuple[tuple[int, ...], ...],
    bufs: list[torch.Tensor],
    params: list[torch.Tensor],
    key: tuple,
) -> TapeRecord | None:
    """Runs ``group`` through ``op``'s capture for ``key`` (``capture_key``), its outputs
    written into their rows; ``None`` (nothing run) where the op, or this row count, takes
    the per-group route. ``layout``: the group's gathers' positions (``gather_layouts``).
    Called with grad mode off and no weight-gradient collector (``run.py``)."""
    if "capture_refused" in op.runtime:
        return None
    count = group.count
    blocks = []
    for ga, positions in zip(group.gathers, layout):
        x = read(bufs[ga.tid], ga.rows)
        blocks.append(x if len(positions) == 1 else x.view(len(positions), count, *x.shape[1:]))
    cap = captured(op, blocks, layout, params, count, key)
    if cap is None:
        return None
    flat = cap.forward(*params, *blocks)
    if cap.exact:
        copy_rows(bufs, group.outs, flat[: cap.n_out])
    else:
        write_outputs(bufs, group.outs, flat[: cap.n_out])
    return TapeRecord(cap, flat[cap.n_out :])


def gather_layouts(plan: Plan) -> list[tuple[tuple[int, ...], ...]]:
    """Each group's gathers' argument positions, kept in the plan's ``reuse``: a gather of
    ``k`` arguments goes into the capture as one ``(k, rows, ...)`` block, which the capture
    splits at these positions."""
    layouts = plan.reuse.get("gather_layouts")
    if layouts is None:
        layouts = plan.reuse["gather_layouts"] = [
            tuple(tuple(ga.positions) for ga in g.gathers) for g in plan.groups
        ]
    return layouts


def tape_backward(
    record: TapeRecord, group: Group, gbuf: list[torch.Tensor | None]
) -> tuple[torch.Tensor | None, ...]:
    """Adds ``group``'s argument gradients into ``gbuf`` from its output rows' gradients there;
    returns the gradients of the op's parameters (in the order the capture took them)."""
    cap = record.cap
    n_params = cap.n_params
    if cap.backward is None:
        return (None,) * n_params
    grads = []
    for (tid, start, end), wanted in zip(group.outs, cap.grad_outputs):
        if wanted:
            buf = gbuf[tid]
            grads.append(buf[start:end] if buf is not None else None)
    if any(g is None for g in grads):
        return (None,) * n_params
    saved = record.saved
    res = cap.backward(*saved[cap.n_saved :], *saved[: cap.n_saved], *grads)
    for ga, block in zip(group.gathers, res[n_params:]):
        buf = gbuf[ga.tid]
        if buf is None or block is None:
            continue
        if block.dim() != buf.dim():  # (k, n, ...): the rows of k arguments, in gather order
            block = block.reshape(-1, *buf.shape[1:])
        add_rows(buf, ga.rows, [block])
    return tuple(res[:n_params])


def add_rows(buf: torch.Tensor, rows: Any, parts: list[torch.Tensor | None]) -> None:
    """Adds each part's rows into ``buf`` (``rows``: a slice or an index tensor, split evenly
    among the parts)."""
    if not isinstance(rows, slice):
        index_add_parts(buf, rows, parts)
        return
    count = (rows.stop - rows.start) // len(parts)
    for k, part in enumerate(parts):
        if part is not None:
            buf[rows.start + k * count : rows.start + (k + 1) * count].add_(part)
