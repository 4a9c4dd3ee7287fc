"""Scheduling: the paper's steps 2–5, vectorised with numpy over the whole trace.

Given a ``Trace``, every invocation of the same operation at the same depth joins one *group*
(one batched call). Outputs are laid out in one buffer per tensor type: first the constants, then
each group's outputs as a contiguous block, in (depth, op) order. Every argument of every group
then becomes a row index into its type's buffer. See ``README.md`` beside this file for the
contract with the executor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from foldexp.blocks.internal import integer_range
from foldexp.compiler.agenda import agenda_levels
from foldexp.compiler.input_checks import InvalidInput, check_ids, check_range, scalar_array
from foldexp.compiler.merge import distinct_rows, distinct_scalars
from foldexp.compiler.native_trace import int64_array
from foldexp.compiler.sinks import depths_with_sinks_last
from foldexp.compiler.trace import Trace

if TYPE_CHECKING:
    from foldexp.compiler.cache import BatchTrace
from foldexp.types import TensorType

__all__ = ["ORDERS", "Gather", "Group", "InvalidInput", "Plan", "schedule"]

Index = slice | torch.Tensor  # rows of a buffer: a contiguous range, or explicit row numbers


@dataclass
class Gather:
    """One read of a group: rows of buffer ``tid`` for the arguments at ``positions``.

    All arguments of one type are read in one call; the result is split into ``len(positions)``
    equal chunks of ``count`` rows, chunk ``j`` being argument ``positions[j]``.
    """

    tid: int
    rows: Index
    positions: list[int]


@dataclass
class Group:
    """One batched call: ``count`` invocations of op ``op`` at ``depth`` (after ``merged``
    more, equal to some of those, were folded into them)."""

    op: int
    depth: int
    count: int
    gathers: list[Gather]
    outs: list[tuple[int, int, int]]  # per output: (tid, first row, end row) in its buffer
    merged: int = 0


@dataclass
class Plan:
    """Everything the executor needs for one batch; plain data (picklable, device-free)."""

    types: list[TensorType]
    rows_per_type: list[int]
    constants: list[torch.Tensor | None]  # per type: the constant rows, stacked
    groups: list[Group]
    outputs: list[tuple[int, Index]]  # per output component: (tid, rows), one row per input
    metrics: dict[str, tuple[int, Index, torch.Tensor]] = field(default_factory=dict)
    num_inputs: int = 0
    max_depth: int = 0
    op_names: list[str] = field(default_factory=list)
    # The executor's reusable state for running this plan again (``executor/replay.py``): shared
    # by the shallow copies the plan cache hands out, never pickled.
    reuse: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "reuse": {}}

    def copy(self) -> Plan:
        """A shallow copy: the same groups and the same ``reuse``, timings of its own."""
        new = object.__new__(Plan)
        new.__dict__.update(self.__dict__)
        return new

    @property
    def num_calls(self) -> int:
        """Operation calls per execution (one per group)."""
        return len(self.groups)

    @cached_property
    def num_nodes(self) -> int:
        """Operation invocations batched into those calls (merged ones included)."""
        return sum(g.count + g.merged for g in self.groups)

    @cached_property
    def num_merged(self) -> int:
        """Invocations not computed because an equal one was (see ``schedule``'s ``merge``)."""
        return sum(g.merged for g in self.groups)

    @cached_property
    def merged_ops(self) -> list[int]:
        """The ops some of whose invocations were merged: they must not be random when run."""
        return sorted({g.op for g in self.groups if g.merged})

    def describe(self) -> str:
        """The schedule, one line per (depth, operation): count and tensor shapes."""
        merged = f" ({self.num_merged} merged)" if self.num_merged else ""
        lines = [
            f"schedule: {self.num_inputs} inputs, {self.num_nodes} nodes{merged}, "
            f"{self.num_calls} calls, max depth {self.max_depth}"
        ]
        width = max([24, *(len(self.op_names[g.op]) for g in self.groups)])
        for g in self.groups:
            ins = ", ".join(f"{len(ga.positions)}x{_shape(self.types[ga.tid])}" for ga in g.gathers)
            outs = ", ".join(_shape(self.types[t]) for t, _, _ in g.outs)
            more = f" (+{g.merged} merged)" if g.merged else ""
            lines.append(
                f"  depth {g.depth:3d}  {self.op_names[g.op]:<{width}s} x{g.count:<6d} "
                f"in: {ins or '-'}  out: {outs}{more}"
            )
        return "\n".join(lines)


def _shape(t: TensorType) -> str:
    dt = str(t.dtype).replace("torch.", "")
    return f"{tuple(t.shape)}{'' if dt == 'float32' else ':' + dt}"


def _as_index(rows: np.ndarray) -> Index:
    """A contiguous ascending range becomes a slice (a free view); anything else a tensor."""
    n = len(rows)
    if n and rows[-1] - rows[0] == n - 1 and (n == 1 or bool(np.all(np.diff(rows) == 1))):
        return slice(int(rows[0]), int(rows[0]) + n)
    return torch.from_numpy(np.ascontiguousarray(rows, dtype=np.int64))


def _stack_payloads(
    t: TensorType, payloads: list[Any], values: np.ndarray | None = None
) -> torch.Tensor:
    """The constant rows of type ``t``; ``values``: scalar payloads already as one numpy array
    (converting that is 20x faster than ``torch.tensor`` on the list: 2.3 ms for 32k ids)."""
    if not t.shape:
        # integers and booleans only from an integer array: torch refuses other payloads there
        kinds = "biuf" if t.dtype.is_floating_point else "biu"
        if values is not None and values.ndim == 1 and values.dtype.kind in kinds:
            return torch.from_numpy(values).to(t.dtype)
        return torch.tensor(payloads, dtype=t.dtype)
    if all(isinstance(p, torch.Tensor) for p in payloads):
        return torch.stack([p.to(t.dtype) for p in payloads]).reshape(len(payloads), *t.shape)
    arr = np.stack([p.numpy() if isinstance(p, torch.Tensor) else np.asarray(p) for p in payloads])
    return torch.as_tensor(arr, dtype=t.dtype).reshape(len(payloads), *t.shape)


ORDERS = ("depth", "agenda")


def _stable_order(levels: np.ndarray) -> np.ndarray:
    """``argsort(levels, kind="stable")``; small levels as int16, which numpy radix-sorts
    (12x faster than int64 on 16k invocations)."""
    if len(levels) and int(levels.max()) < np.iinfo(np.int16).max and levels.min() >= 0:
        levels = levels.astype(np.int16)
    return np.argsort(levels, kind="stable")


def _merge_group(
    arg_rows: np.ndarray, candidate: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Merges a group's equal invocations among ``candidate`` ones (arguments all shared).

    Returns the invocations kept (ascending), each invocation's row slot among them, and which
    invocations had an equal one; ``None`` when nothing merges.
    """
    cand = np.flatnonzero(candidate)
    if len(cand) < 2:
        return None
    keep_c, slot_c, repeated_c = distinct_rows(arg_rows[cand])
    if len(keep_c) == len(cand):
        return None
    keep = np.ones(len(arg_rows), dtype=bool)
    keep[cand] = False
    keep[cand[keep_c]] = True
    slots = np.cumsum(keep) - 1
    slots[cand] = slots[cand[keep_c[slot_c]]]  # a merged invocation takes its twin's rows
    repeated = np.zeros(len(arg_rows), dtype=bool)
    repeated[cand] = repeated_c
    return np.flatnonzero(keep), slots, repeated


@dataclass
class _Layout:
    """Where every value lives while a plan is laid out (indexed by value id or type id)."""

    row: np.ndarray  # value id → row in its type's buffer (-1: not placed yet)
    val_tid: np.ndarray  # value id → tensor type id
    cursor: list[int] = field(default_factory=list)  # type id → rows used so far
    constants: list[torch.Tensor | None] = field(default_factory=list)  # type id → stacked rows
    # Values known to equal another value of the batch: only invocations whose arguments are
    # all such values can be equal to another invocation (``merge.py``). None: no merging.
    shared: np.ndarray | None = None
    # Per integer scalar type: its constant rows' values, for checking ids (``check_ids``).
    row_values: dict[int, np.ndarray] = field(default_factory=dict)


_Bucket = tuple[int, np.ndarray, np.ndarray, np.ndarray]  # op index, first ids, args, selection


def schedule(
    trace: Trace | BatchTrace,
    out_vids: np.ndarray,
    order: str = "depth",
    merge: Sequence[bool] | None = None,
    sinks_last: bool = False,
) -> Plan:
    """Turns a trace into a ``Plan``: groups by (depth, op), buffer layout, row indices.

    ``order="agenda"`` groups by DyNet's agenda steps instead of depths (``agenda.py``); the
    groups' ``depth`` field then holds the step. ``merge`` (per op: may its equal invocations
    be computed once?) merges equal scalar constants and equal invocations (``merge.py``).
    ``sinks_last`` (depth order): invocations no other one reads run at the deepest depth
    (``sinks.py``).
    """
    if order not in ORDERS:
        raise ValueError(f"schedule order {order!r}; expected one of {ORDERS}")
    steps = agenda_levels(trace) if order == "agenda" else None
    lay = _Layout(
        row=np.full(trace.num_values, -1, dtype=np.int64),
        val_tid=np.full(trace.num_values, -1, dtype=np.int64),
        shared=np.zeros(trace.num_values, dtype=bool) if merge is not None and any(merge) else None,
    )
    _place_constants(trace, lay)  # step 1: constants first in each type's buffer
    # per op, as arrays once: the sinks' pass and the buckets both read them
    firsts = [int64_array(f) for f in trace.op_first]
    all_args = [int64_array(a) for a in trace.op_args]
    if steps is None and sinks_last:
        steps = depths_with_sinks_last(trace, firsts, all_args)
    by_depth, out_tids, max_depth = _bucket_by_depth(trace, steps, firsts, all_args, lay)
    while len(lay.cursor) < len(trace.types):  # types first seen as op outputs
        lay.cursor.append(0)
        lay.constants.append(None)
    groups = [  # steps 3–5: lay out outputs per type, index every argument
        _lay_out_group(trace, d, bucket, out_tids[bucket[0]], merge, lay)
        for d in sorted(by_depth)
        for bucket in by_depth[d]
    ]
    outputs, metrics = _outputs_and_metrics(trace, out_vids, lay)
    return Plan(
        types=list(trace.types),
        rows_per_type=lay.cursor,
        constants=lay.constants,
        groups=groups,
        outputs=outputs,
        metrics=metrics,
        num_inputs=int(out_vids.shape[0]),
        max_depth=trace.max_depth if order == "agenda" else max_depth,
        op_names=[op.name for op in trace.ops],
    )


def _place_constants(trace: Trace | BatchTrace, lay: _Layout) -> None:
    """Rows for every constant, per type; equal scalar constants share a row when merging."""
    for tid, t in enumerate(list(trace.types)):
        vids = int64_array(trace.const_vids[tid])
        lay.val_tid[vids] = tid
        payloads = trace.const_payloads[tid]
        limits = integer_range(t.dtype) if not t.shape and len(vids) else None
        merging = lay.shared is not None and not t.shape and len(vids) > 1
        values = scalar_array(payloads) if limits is not None or merging else None
        if limits is not None and values is not None:
            check_range(t, values, payloads, limits)
        found = distinct_scalars(values) if merging and values is not None else None
        if found is not None:
            distinct, slot, repeated = found
            lay.row[vids] = slot
            lay.shared[vids] = repeated  # type: ignore[index]
            lay.cursor.append(len(distinct))
            lay.constants.append(torch.as_tensor(distinct).to(t.dtype))
            if limits is not None:
                lay.row_values[tid] = distinct
            continue
        lay.row[vids] = np.arange(len(vids))
        lay.cursor.append(len(vids))
        lay.constants.append(_stack_payloads(t, payloads, values) if len(vids) else None)
        if limits is not None and values is not None:
            lay.row_values[tid] = values


def _bucket_by_depth(
    trace: Trace | BatchTrace,
    steps: list[np.ndarray] | None,
    firsts: list[np.ndarray],
    all_args: list[np.ndarray],
    lay: _Layout,
) -> tuple[dict[int, list[_Bucket]], list[list[int]], int]:
    """Each op's invocations bucketed by depth (or agenda step), input order kept inside
    (step 2); ``firsts`` and ``all_args``: each op's first output ids and flat arguments.

    Returns the buckets per depth, each op's output type ids, and the deepest invocation's depth
    (the trace's own ``max_depth`` walks every value).
    """
    max_depth = 0
    by_depth: dict[int, list[_Bucket]] = {}
    out_tids: list[list[int]] = []
    for i, op in enumerate(trace.ops):
        out_tids.append([trace.type_id(t) for t in op.out_types])
        if len(trace.op_depth[i]) == 0:
            continue
        depth = steps[i] if steps is not None else int64_array(trace.op_depth[i])
        max_depth = max(max_depth, int(depth.max()))
        first = firsts[i]
        args = all_args[i].reshape(len(depth), len(op.in_types))
        if op.id_limit is not None:
            tid = trace.type_ids.get(op.in_types[0], -1)
            check_ids(op, args[:, 0], lay.row, lay.row_values.get(tid))
        order = _stable_order(depth)  # a stable sort keeps input order inside a depth
        sorted_depth = depth[order]
        starts = np.concatenate(([0], np.flatnonzero(np.diff(sorted_depth)) + 1))
        levels = sorted_depth[starts]  # sorted already: no second sort, as np.unique would do
        ends = [*starts[1:].tolist(), len(order)]
        for d, s, e in zip(levels.tolist(), starts.tolist(), ends):
            sel = order[s:e]
            by_depth.setdefault(d, []).append((i, first[sel], args[sel], sel))
    return by_depth, out_tids, max_depth


def _lay_out_group(
    trace: Trace | BatchTrace,
    depth: int,
    bucket: _Bucket,
    out_tids: list[int],
    merge: Sequence[bool] | None,
    lay: _Layout,
) -> Group:
    """One (depth, op) group: merges equal invocations, places its outputs, indexes its args."""
    i, first, args, _sel = bucket
    op = trace.ops[i]
    arg_rows = lay.row[args]  # (count, arity)
    count, slots, merged = len(first), None, 0
    if lay.shared is not None and merge[i] and count > 1 and args.shape[1]:  # type: ignore[index]
        found = _merge_group(arg_rows, lay.shared[args].all(axis=1))
        if found is not None:
            kept, slots, repeated = found
            merged, count = count - len(kept), len(kept)
            arg_rows = arg_rows[kept]
            for k in range(len(out_tids)):
                lay.shared[first[repeated] + k] = True
    outs = []
    for k, tid in enumerate(out_tids):
        start = lay.cursor[tid]
        lay.row[first + k] = start + (np.arange(count) if slots is None else slots)
        lay.val_tid[first + k] = tid
        lay.cursor[tid] = start + count
        outs.append((tid, start, start + count))
    arg_tids = lay.val_tid[args[0]] if len(args) else []
    gathers = []
    for tid in dict.fromkeys(int(t) for t in arg_tids):
        positions = [a for a in range(len(op.in_types)) if arg_tids[a] == tid]
        rows = arg_rows[:, positions].T.reshape(-1)
        gathers.append(Gather(tid, _as_index(rows), positions))
    return Group(i, depth, count, gathers, outs, merged)


def _outputs_and_metrics(
    trace: Trace | BatchTrace, out_vids: np.ndarray, lay: _Layout
) -> tuple[list[tuple[int, Index]], dict[str, tuple[int, Index, torch.Tensor]]]:
    """Where each output column and each metric's values lie, as (type id, rows)."""
    outputs = []
    for c in range(out_vids.shape[1]):
        vids = out_vids[:, c]
        outputs.append((int(lay.val_tid[vids[0]]), _as_index(lay.row[vids])))
    metrics = {}
    for name, (inputs, vids_list) in trace.metrics.items():
        vids = int64_array(vids_list)
        metrics[name] = (
            int(lay.val_tid[vids[0]]),
            _as_index(lay.row[vids]),
            torch.as_tensor(inputs, dtype=torch.int64),
        )
    return outputs, metrics
