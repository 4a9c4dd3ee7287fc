"""Caches keyed on input identity: per-input traces, and whole plans of batches that come back.

Tracing walks Python blocks node by node and is the slowest part of building a batch. Across
epochs the same inputs come back in new combinations, so — as TF Fold's ``build_loom_inputs``
did — each input's trace is kept in compact numpy form, and a batch trace is the concatenation
of its inputs' traces with value ids shifted. Only the scheduler then runs per batch.

Inputs are recognised by identity (``id`` plus an ``is`` check), so the cache is only correct
for inputs that are not mutated after they were first seen (e.g. ``foldexp.data.trees.Tree``,
which is immutable). It is opt-in: ``Compiler(block, cache_traces=True)``.

A batch that comes back whole -- the same inputs in the same order: an evaluation split batched
alike every epoch, a repeated request -- needs no trace and no schedule at all: ``PlanCache``
keeps its plan, under the same assumption. Shuffled training batches never repeat, so a plan is
only kept once its batch has been seen twice: they cannot push out the plans that do come back.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from foldexp.blocks.internal import Block, InputError, Op, run_steps
from foldexp.compiler.native_trace import native_trace_fn
from foldexp.compiler.trace import Trace, flatten_output
from foldexp.types import TensorType, Type

if TYPE_CHECKING:
    from foldexp.compiler.schedule import Plan

__all__ = ["TraceCache", "BatchTrace", "PlanCache"]

_EMPTY = np.zeros(0, dtype=np.int64)


@dataclass
class _InputTrace:
    """One input's trace, frozen into arrays with value ids local to the input."""

    source: Any  # the input itself: identity check, and keeps its id from being reused
    num_values: int
    max_depth: int
    types: list[TensorType]
    const_vids: list[np.ndarray]
    const_payloads: list[list[Any]]
    ops: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]]  # (op index, depth, first, args)
    metrics: dict[str, np.ndarray]
    out: np.ndarray


def _freeze(x: Any, tr: Trace, out: list[int]) -> _InputTrace:
    as_array = np.asarray
    ops = [
        (
            i,
            as_array(tr.op_depth[i], np.int64),
            as_array(tr.op_first[i], np.int64),
            as_array(tr.op_args[i], np.int64),
        )
        for i in range(len(tr.ops))
        if tr.op_depth[i]
    ]
    return _InputTrace(
        source=x,
        num_values=tr.num_values,
        max_depth=tr.max_depth,
        types=list(tr.types),
        const_vids=[as_array(v, np.int64) for v in tr.const_vids],
        const_payloads=[list(p) for p in tr.const_payloads],  # the trace is reused
        ops=ops,
        metrics={k: as_array(v, np.int64) for k, (_, v) in tr.metrics.items() if v},
        out=as_array(out, np.int64),
    )


class BatchTrace:
    """A batch trace assembled from cached input traces; what ``schedule`` reads."""

    def __init__(self, ops: Sequence[Op]) -> None:
        self.ops = list(ops)
        self.types: list[TensorType] = []
        self.type_ids: dict[TensorType, int] = {}
        self.const_vids: list[Any] = []
        self.const_payloads: list[list[Any]] = []
        self.op_depth: list[Any] = [_EMPTY] * len(self.ops)
        self.op_first: list[Any] = [_EMPTY] * len(self.ops)
        self.op_args: list[Any] = [_EMPTY] * len(self.ops)
        self.metrics: dict[str, tuple[Any, Any]] = {}
        self.num_values = 0
        self.max_depth = 0

    # The same type table as a Trace: ids in first-seen order, each with its constant lists.
    type_id = Trace.type_id


class TraceCache:
    """Maps inputs (by identity) to their frozen traces, for one compiled block.

    One batch is traced at a time (a lock): the trace reused for every new input must not be
    shared by two threads building with one compiler (a server)."""

    def __init__(self, fuse: bool = False) -> None:
        self.fuse = fuse  # trace pipes' runs of op blocks as fused ops (see ``trace_batch``)
        self._entries: dict[int, _InputTrace] = {}
        # One trace reused (reset) for every new input, with its tracing closure built once.
        self._tracer: tuple[Block, Trace, Any] | None = None
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def __getstate__(self) -> dict[str, Any]:
        # A copy keeps the traces, gets a lock of its own (locks do not pickle) and builds its
        # own reusable trace when it first needs one.
        return {"fuse": self.fuse, "entries": self._entries}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["fuse"])  # type: ignore[misc]
        self._entries = state["entries"]

    def clear(self) -> None:
        self._entries.clear()

    def _get(
        self, block: Block, ops: Sequence[Op], x: Any, k: int, output_type: Type
    ) -> _InputTrace:
        entry = self._entries.get(id(x))
        if entry is not None and entry.source is x:
            return entry
        if self._tracer is None or self._tracer[0] is not block:
            tr = Trace(ops)
            self._tracer = (block, tr, native_trace_fn(block, tr, fuse=self.fuse))
        _, tr, run = self._tracer
        tr.reset()
        try:
            try:
                out = run(x)
            except RecursionError:  # too deep for the closures: an explicit stack (``trace.py``)
                tr.reset()
                out = run_steps(block, tr, x, self.fuse)
        except InputError as e:
            e.path.insert(0, k)
            raise
        entry = self._entries[id(x)] = _freeze(x, tr, flatten_output(output_type, out))
        return entry

    def trace_batch(
        self, block: Block, ops: Sequence[Op], inputs: Sequence[Any], output_type: Type
    ) -> tuple[BatchTrace, np.ndarray]:
        """Like ``trace_batch``, reusing and filling the cache."""
        with self._lock:
            entries = [self._get(block, ops, x, k, output_type) for k, x in enumerate(inputs)]
        bt = BatchTrace(ops)
        n_ops = len(ops)
        # Each input's value ids start at its offset in the batch. The pieces are concatenated
        # first and their offsets added once per array (``_shifted``): adding them input by input
        # made a few small numpy calls per input (the peers' 256 trees: 3 ms of a 7 ms build).
        sizes = np.fromiter((e.num_values for e in entries), np.int64, len(entries))
        offsets = np.cumsum(sizes) - sizes
        depth: list[list[np.ndarray]] = [[] for _ in range(n_ops)]
        first: list[_Pieces] = [_Pieces() for _ in range(n_ops)]
        args: list[_Pieces] = [_Pieces() for _ in range(n_ops)]
        cvids: list[_Pieces] = []
        metric_vids: dict[str, _Pieces] = {}
        for k, e in enumerate(entries):
            for lt, t in enumerate(e.types):
                gt = bt.type_id(t)
                if gt == len(cvids):
                    cvids.append(_Pieces())
                if len(e.const_vids[lt]):
                    cvids[gt].add(e.const_vids[lt], k)
                    bt.const_payloads[gt].extend(e.const_payloads[lt])
            for i, d, f, a in e.ops:
                depth[i].append(d)
                first[i].add(f, k)
                args[i].add(a, k)
            for name, vids in e.metrics.items():
                metric_vids.setdefault(name, _Pieces()).add(vids, k)
            bt.max_depth = max(bt.max_depth, e.max_depth)
        bt.num_values = int(sizes.sum())
        bt.const_vids = [v.shifted(offsets) for v in cvids]
        for i in range(n_ops):
            if depth[i]:
                bt.op_depth[i] = np.concatenate(depth[i])
                bt.op_first[i] = first[i].shifted(offsets)
                bt.op_args[i] = args[i].shifted(offsets)
        bt.metrics = {n: (v.owners(), v.shifted(offsets)) for n, v in metric_vids.items()}
        width = len(entries[0].out) if entries else 0
        if width:
            out_vids = np.stack([e.out for e in entries]) + offsets[:, None]
        else:
            out_vids = np.zeros((len(inputs), 0), np.int64)
        return bt, out_vids


class PlanCache:
    """Plans of whole batches, by the identity of their inputs (in order) and the flags they
    were scheduled with (``flags``: whether equal invocations merge, whether sinks ran last,
    then per op whether it is random, since dropout on or off changes the plan either way).

    A plan is admitted the second time its batch is built, and at most ``size`` are kept, least
    recently used dropped first; of batches seen once only a hash is kept (at most
    ``4 * size``). A hit is checked input by input with ``is``, so a hash collision costs a
    miss, never a wrong plan; the kept inputs stay alive, so their ids cannot be reused. A lock
    keeps the bookkeeping whole when several threads build with one compiler (a server).
    """

    def __init__(self, size: int = 64) -> None:
        self.size = size
        self._plans: OrderedDict[int, tuple[tuple[Any, ...], tuple[bool, ...], Plan]]
        self._plans = OrderedDict()
        self._seen: OrderedDict[int, None] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0

    def __len__(self) -> int:
        return len(self._plans)

    def __getstate__(self) -> dict[str, Any]:
        # A copy (a DataLoader worker's, a deep copy of the model) starts empty, with a lock of
        # its own: locks do not pickle, and kept batches are the original's to reuse.
        return {"size": self.size}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["size"])  # type: ignore[misc]

    def clear(self) -> None:
        with self._lock:
            self._plans.clear()
            self._seen.clear()

    @staticmethod
    def _key(inputs: Sequence[Any], flags: tuple[bool, ...]) -> int:
        return hash((tuple(map(id, inputs)), flags))

    def get(self, inputs: Sequence[Any], flags: tuple[bool, ...]) -> Plan | None:
        """The plan of this very batch, if it is kept (a shallow copy: timings are per call)."""
        key = self._key(inputs, flags)
        with self._lock:
            entry = self._plans.get(key)
            if entry is None:
                return None
            sources, kept_flags, plan = entry
            if kept_flags != flags or len(sources) != len(inputs):
                return None
            if any(a is not b for a, b in zip(sources, inputs)):
                return None
            self._plans.move_to_end(key)
            self.hits += 1
        return plan.copy()

    def put(self, inputs: Sequence[Any], flags: tuple[bool, ...], plan: Plan) -> None:
        """Records a newly built batch; keeps its plan if the batch was seen before."""
        key = self._key(inputs, flags)
        with self._lock:
            if key not in self._seen:
                self._seen[key] = None
                if len(self._seen) > 4 * self.size:
                    self._seen.popitem(last=False)
                return
            self._plans[key] = (tuple(inputs), flags, plan)
            self._plans.move_to_end(key)
            if len(self._plans) > self.size:
                self._plans.popitem(last=False)


class _Pieces:
    """Arrays of value ids from several inputs, to be joined with each input's offset added."""

    def __init__(self) -> None:
        self.arrays: list[np.ndarray] = []
        self.inputs: list[int] = []

    def add(self, array: np.ndarray, k: int) -> None:
        self.arrays.append(array)
        self.inputs.append(k)

    def owners(self) -> np.ndarray:
        """For each joined element, the input it came from."""
        lengths = [len(a) for a in self.arrays]
        return np.repeat(np.asarray(self.inputs, np.int64), lengths)

    def shifted(self, offsets: np.ndarray) -> np.ndarray:
        if not self.arrays:
            return _EMPTY
        joined = np.concatenate(self.arrays)  # a new array: adding in place touches no input's
        joined += offsets[self.owners()]
        return joined
