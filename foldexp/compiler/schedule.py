"""Scheduling: the paper's steps 2–5, vectorised with numpy over the whole trace.

Given a ``Trace``, every invocation of the same operation at the same depth joins one *group*
(one batched call). Outputs are laid out in one buffer per tensor type: first the constants, then
each group's outputs as a contiguous block, in (depth, op) order. Every argument of every group
then becomes a row index into its type's buffer. See ``README.md`` beside this file for the
contract with the executor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from foldexp.blocks.internal import Op, integer_range
from foldexp.compiler.agenda import agenda_levels
from foldexp.compiler.merge import distinct_rows, distinct_scalars
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

    def to(self, device: torch.device) -> Plan:
        """A copy whose row indices live on ``device`` (constants move when buffers are made)."""
        if device.type == "cpu":
            return self

        def move(rows: Index) -> Index:
            return rows if isinstance(rows, slice) else rows.to(device, non_blocking=True)

        groups = [
            Group(
                g.op,
                g.depth,
                g.count,
                [Gather(ga.tid, move(ga.rows), ga.positions) for ga in g.gathers],
                g.outs,
                g.merged,
            )
            for g in self.groups
        ]
        return replace(
            self,
            groups=groups,
            outputs=[(t, move(r)) for t, r in self.outputs],
            metrics={k: (t, move(r), i) for k, (t, r, i) in self.metrics.items()},
        )

    @property
    def num_calls(self) -> int:
        """Operation calls per execution (one per group)."""
        return len(self.groups)

    @property
    def num_nodes(self) -> int:
        """Operation invocations batched into those calls (merged ones included)."""
        return sum(g.count + g.merged for g in self.groups)

    @property
    def num_merged(self) -> int:
        """Invocations not computed because an equal one was (see ``schedule``'s ``merge``)."""
        return sum(g.merged for g in self.groups)

    @property
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


def _stack_payloads(t: TensorType, payloads: list[Any]) -> torch.Tensor:
    if not t.shape:
        return torch.tensor(payloads, dtype=t.dtype)
    if all(isinstance(p, torch.Tensor) for p in payloads):
        return torch.stack([p.to(t.dtype) for p in payloads]).reshape(len(payloads), *t.shape)
    arr = np.stack([p.numpy() if isinstance(p, torch.Tensor) else np.asarray(p) for p in payloads])
    return torch.as_tensor(arr, dtype=t.dtype).reshape(len(payloads), *t.shape)


class InvalidInput(ValueError):
    """A batch holds a value no plan can take: an integer outside its dtype, an id outside the
    table it looks up. Found batch-wide, with numpy; ``Compiler.build`` then traces the batch
    again through the blocks' own checks to name the input and the path (an ``InputError``)."""


def _scalar_array(payloads: list[Any]) -> np.ndarray | None:
    """Scalar constants as one numpy array (``None`` if numpy cannot make one)."""
    try:
        return np.asarray(payloads)
    except (TypeError, ValueError, RuntimeError):  # e.g. tensors on a GPU
        return None


def _check_range(
    t: TensorType, values: np.ndarray, payloads: list[Any], limits: tuple[int, int]
) -> None:
    """Raises ``InvalidInput`` if an integer constant does not fit ``t``'s integer dtype (torch
    would fail on it, or wrap it around)."""
    if values.ndim != 1 or not len(values):
        return
    if values.dtype.kind in "iub":
        low, high = int(values.min()), int(values.max())
    else:  # numpy fell back to floats or objects: an integer beyond 64 bits, or a mix of signs
        try:
            ints = [int(p) for p in payloads]
        except (TypeError, ValueError, OverflowError):
            return
        low, high = min(ints), max(ints)
    if low < limits[0] or high > limits[1]:
        bad = low if low < limits[0] else high
        raise InvalidInput(f"the integer {bad} does not fit {t!r} ({limits[0]} .. {limits[1]})")


def _check_ids(op: Op, ids: np.ndarray, row: np.ndarray, values: np.ndarray | None) -> None:
    """Raises ``InvalidInput`` if an id that ``op`` reads from a constant (a ``Scalar`` of the
    input, not an op's output) is outside its table: torch would raise a bare ``IndexError``
    (or assert on a GPU) with nothing to say which input held it."""
    if values is None:
        return
    rows = row[ids]
    ids = values[rows[rows >= 0]]  # only constants have rows yet (groups are laid out later)
    if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= op.id_limit):  # type: ignore[operator]
        raise InvalidInput(f"an id outside {op.id_table}: expected 0 <= id < {op.id_limit}")


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


def schedule(
    trace: Trace | BatchTrace,
    out_vids: np.ndarray,
    order: str = "depth",
    merge: Sequence[bool] | None = None,
) -> Plan:
    """Turns a trace into a ``Plan``: groups by (depth, op), buffer layout, row indices.

    ``order="agenda"`` groups by DyNet's agenda steps instead of depths (``agenda.py``); the
    groups' ``depth`` field then holds the step. ``merge`` (per op: may its equal invocations
    be computed once?) merges equal scalar constants and equal invocations (``merge.py``).
    """
    if order not in ORDERS:
        raise ValueError(f"schedule order {order!r}; expected one of {ORDERS}")
    steps = agenda_levels(trace) if order == "agenda" else None
    row = np.full(trace.num_values, -1, dtype=np.int64)  # value id → row in its type's buffer
    cursor: list[int] = []
    val_tid = np.full(trace.num_values, -1, dtype=np.int64)  # value id → tensor type id
    constants: list[torch.Tensor | None] = []
    # Values known to equal another value of the batch: only invocations whose arguments are
    # all such values can be equal to another invocation (``merge.py``).
    shared = np.zeros(trace.num_values, dtype=bool) if merge is not None and any(merge) else None
    # Per integer scalar type: its constant rows' values, for checking ids (``_check_ids``).
    row_values: dict[int, np.ndarray] = {}
    for tid, t in enumerate(list(trace.types)):
        vids = np.asarray(trace.const_vids[tid], dtype=np.int64)
        val_tid[vids] = tid
        payloads = trace.const_payloads[tid]
        limits = integer_range(t.dtype) if not t.shape and len(vids) else None
        merging = shared is not None and not t.shape and len(vids) > 1
        values = _scalar_array(payloads) if limits is not None or merging else None
        if limits is not None and values is not None:
            _check_range(t, values, payloads, limits)
        found = distinct_scalars(values) if merging and values is not None else None
        if found is not None:
            distinct, slot, repeated = found
            row[vids] = slot
            shared[vids] = repeated  # type: ignore[index]
            cursor.append(len(distinct))
            constants.append(torch.as_tensor(distinct).to(t.dtype))
            if limits is not None:
                row_values[tid] = distinct
            continue
        row[vids] = np.arange(len(vids))
        cursor.append(len(vids))
        constants.append(_stack_payloads(t, payloads) if len(vids) else None)
        if limits is not None and values is not None:
            row_values[tid] = values

    max_depth = 0  # the deepest invocation (the trace's own ``max_depth`` walks every value)
    # Step 2: bucket each op's invocations by depth (a stable sort keeps input order inside).
    by_depth: dict[int, list[tuple[int, np.ndarray, np.ndarray, np.ndarray]]] = {}
    out_tids: list[list[int]] = []
    for i, op in enumerate(trace.ops):
        out_tids.append([trace.type_id(t) for t in op.out_types])
        if len(trace.op_depth[i]) == 0:
            continue
        depth = steps[i] if steps is not None else np.asarray(trace.op_depth[i], np.int64)
        if steps is None:
            max_depth = max(max_depth, int(depth.max()))
        first = np.asarray(trace.op_first[i], dtype=np.int64)
        args = np.asarray(trace.op_args[i], dtype=np.int64).reshape(len(depth), len(op.in_types))
        if op.id_limit is not None:
            _check_ids(op, args[:, 0], row, row_values.get(trace.type_ids.get(op.in_types[0], -1)))
        order = _stable_order(depth)
        sorted_depth = depth[order]
        starts = np.concatenate(([0], np.flatnonzero(np.diff(sorted_depth)) + 1))
        levels = sorted_depth[starts]  # sorted already: no second sort, as np.unique would do
        ends = [*starts[1:].tolist(), len(order)]
        for d, s, e in zip(levels.tolist(), starts.tolist(), ends):
            sel = order[s:e]
            by_depth.setdefault(d, []).append((i, first[sel], args[sel], sel))
    while len(cursor) < len(trace.types):  # types first seen as op outputs
        cursor.append(0)
        constants.append(None)

    # Steps 3–5: lay out outputs per type, index every argument.
    groups: list[Group] = []
    for d in sorted(by_depth):
        for i, first, args, _sel in by_depth[d]:
            op = trace.ops[i]
            arg_rows = row[args]  # (count, arity)
            count, slots, merged = len(first), None, 0
            if shared is not None and merge[i] and count > 1 and args.shape[1]:  # type: ignore[index]
                found = _merge_group(arg_rows, shared[args].all(axis=1))
                if found is not None:
                    kept, slots, repeated = found
                    merged, count = count - len(kept), len(kept)
                    arg_rows = arg_rows[kept]
                    for k in range(len(out_tids[i])):
                        shared[first[repeated] + k] = True
            outs = []
            for k, tid in enumerate(out_tids[i]):
                start = cursor[tid]
                row[first + k] = start + (np.arange(count) if slots is None else slots)
                val_tid[first + k] = tid
                cursor[tid] = start + count
                outs.append((tid, start, start + count))
            arg_tids = val_tid[args[0]] if len(args) else []
            gathers = []
            for tid in dict.fromkeys(int(t) for t in arg_tids):
                positions = [a for a in range(len(op.in_types)) if arg_tids[a] == tid]
                rows = arg_rows[:, positions].T.reshape(-1)
                gathers.append(Gather(tid, _as_index(rows), positions))
            groups.append(Group(i, d, count, gathers, outs, merged))

    outputs = []
    for c in range(out_vids.shape[1]):
        vids = out_vids[:, c]
        outputs.append((int(val_tid[vids[0]]), _as_index(row[vids])))
    metrics = {}
    for name, (inputs, vids_list) in trace.metrics.items():
        vids = np.asarray(vids_list, dtype=np.int64)
        metrics[name] = (
            int(val_tid[vids[0]]),
            _as_index(row[vids]),
            torch.as_tensor(inputs, dtype=torch.int64),
        )
    return Plan(
        types=list(trace.types),
        rows_per_type=cursor,
        constants=constants,
        groups=groups,
        outputs=outputs,
        metrics=metrics,
        num_inputs=int(out_vids.shape[0]),
        max_depth=trace.max_depth if steps is not None else max_depth,
        op_names=[op.name for op in trace.ops],
    )
