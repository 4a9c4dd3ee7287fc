"""Tracing: walking blocks over a batch of Python inputs records one graph of operations.

The ``Trace`` is the compiler's ``Tracer``. Every tensor value gets an integer id; constants
(numbers and arrays read from the inputs, zeros) are depth 0 and every operation invocation is
one deeper than its deepest argument — the paper's step 1, done incrementally because inputs are
walked in dependency order. Nothing here is batched yet: the trace is a few flat Python lists per
operation, appended to in the hot loop and turned into numpy arrays by the scheduler.

Inputs are walked by the blocks' closures (``blocks/_closures.py``), which nest a few Python
frames per level of the input. An input too deep for Python's stack (a chain tree of ~150
levels or more) raises ``RecursionError`` there; its partial trace is then rolled back and it is
traced again by ``run_steps`` (``blocks/_steps.py``), whose explicit stack makes any depth
traceable. Ordinary inputs never pay for this.
"""

from __future__ import annotations

import itertools
from bisect import bisect_left
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from foldexp.blocks.internal import Block, InputError, Op, run_steps, structure_flattener
from foldexp.compiler.native_trace import native_trace_fn
from foldexp.types import TensorType, Type, VoidType

__all__ = ["Trace", "trace_batch", "flatten_output", "locate_input_error"]


def flatten_output(output_type: Type, out: Any) -> list[int]:
    """The root output's tensor value ids, flattened (none for a void root)."""
    if isinstance(output_type, VoidType):
        return []
    return structure_flattener(output_type)(out)


class Trace:
    """The recorded graph of one batch: constants, operation invocations, outputs."""

    def __init__(self, ops: Sequence[Op]) -> None:
        self.ops = list(ops)
        self.op_index = {op: i for i, op in enumerate(self.ops)}
        self.types: list[TensorType] = []  # tensor type id → type
        self.type_ids: dict[TensorType, int] = {}
        self.val_depth: list[int] = []  # value id → depth (0 for constants)
        self.const_vids: list[list[int]] = []  # per tensor type: value ids of its constants
        self.const_payloads: list[list[Any]] = []  # per tensor type: the constants' payloads
        self.op_depth: list[list[int]] = [[] for _ in self.ops]  # per op: depth of invocations
        self.op_first: list[list[int]] = [[] for _ in self.ops]  # per op: first output value id
        self.op_args: list[list[int]] = [[] for _ in self.ops]  # per op: flat argument ids
        self.zero_vid: dict[TensorType, int] = {}
        self._appliers: dict[Op, Any] = {}  # ``apply``'s per-op recorders (see ``applier``)
        self.metrics: dict[str, tuple[list[int], list[int]]] = {}  # name → (input#, value id)
        self.current_input = 0

    def reset(self) -> None:
        """Forgets every recorded value but keeps the types and the list objects themselves,
        so closures built over this trace (``applier``, ``constant_adder``) stay valid."""
        for lists in (self.const_vids, self.const_payloads, self.op_depth, self.op_first):
            for values in lists:
                values.clear()
        for values in self.op_args:
            values.clear()
        self.val_depth.clear()
        self.zero_vid.clear()
        for inputs, vids in self.metrics.values():
            inputs.clear()
            vids.clear()
        self.current_input = 0

    def rollback(self, num_values: int) -> None:
        """Forgets every value with an id from ``num_values`` on: what the input being traced
        (``current_input``) recorded since the trace held ``num_values`` values. The lists stay
        the same objects, so closures built over this trace stay valid."""
        del self.val_depth[num_values:]
        # Lists are cut by length from their sorted keys, so that an append the RecursionError
        # interrupted half-way (one list grown, its partner not) leaves nothing behind either.
        n = min(len(self.types), len(self.const_vids), len(self.const_payloads))
        del self.types[n:], self.const_vids[n:], self.const_payloads[n:]
        if len(self.type_ids) != n:
            self.type_ids.clear()
            self.type_ids.update((t, i) for i, t in enumerate(self.types))
        for op, depths, firsts, args in zip(self.ops, self.op_depth, self.op_first, self.op_args):
            n = bisect_left(firsts, num_values)  # first output ids grow with each invocation
            if n < len(firsts):
                del depths[n:], firsts[n:], args[n * len(op.in_types) :]
        for vids, payloads in zip(self.const_vids, self.const_payloads):
            n = bisect_left(vids, num_values)
            del vids[n:], payloads[n:]
        for ttype, vid in list(self.zero_vid.items()):
            if vid >= num_values:
                del self.zero_vid[ttype]
        for name, (inputs, vids) in list(self.metrics.items()):
            n = len(inputs)
            while n and inputs[n - 1] == self.current_input:
                n -= 1
            # By length, not in pairs: a RecursionError may strike between the two appends.
            del inputs[n:], vids[n:]
            if not inputs:
                del self.metrics[name]

    # ---- the Tracer protocol (the hot path: keep it lean) --------------------------------------
    def type_id(self, ttype: TensorType) -> int:
        tid = self.type_ids.get(ttype)
        if tid is None:
            tid = self.type_ids[ttype] = len(self.types)
            self.types.append(ttype)
            self.const_vids.append([])
            self.const_payloads.append([])
        return tid

    def constant(self, ttype: TensorType, payload: Any) -> int:
        tid = self.type_ids.get(ttype)
        if tid is None:
            tid = self.type_id(ttype)
        vid = len(self.val_depth)
        self.val_depth.append(0)
        self.const_vids[tid].append(vid)
        self.const_payloads[tid].append(payload)
        return vid

    def zeros(self, ttype: TensorType) -> int:
        vid = self.zero_vid.get(ttype)
        if vid is None:  # one shared row of zeros per type and batch
            zero = 0 if not ttype.shape else np.zeros(ttype.shape)
            vid = self.zero_vid[ttype] = self.constant(ttype, zero)
        return vid

    def apply(self, op: Op, args: list[int]) -> list[int]:
        run = self._appliers.get(op)
        if run is None:
            run = self._appliers[op] = self.applier(op)
        return run(args)

    def applier(self, op: Op, single: bool = False) -> Callable[..., Any]:
        """``apply`` for one op, with its lists bound: ``f(args) -> outputs`` (a list for one
        output, a tuple for several), or with ``single`` (one input, one output)
        ``f(arg) -> output`` on bare value ids.

        Specialised on arity and output count: this runs once per node of every input.
        """
        i = self.op_index[op]
        vd = self.val_depth
        add_depth, add_first, args_list = (
            self.op_depth[i].append,
            self.op_first[i].append,
            self.op_args[i],
        )
        add_arg, add_args, n = args_list.append, args_list.extend, op.n_out
        if single:

            def apply_one(arg: int) -> int:
                d = vd[arg] + 1
                first = len(vd)
                add_depth(d)
                add_first(first)
                add_arg(arg)
                vd.append(d)
                return first

            return apply_one
        get = vd.__getitem__
        arity = len(op.in_types)

        def apply(args: list[int]) -> list[int]:
            d = (vd[args[0]] if arity == 1 else max(map(get, args))) + 1
            first = len(vd)
            add_depth(d)
            add_first(first)
            add_args(args)
            if n == 1:
                vd.append(d)
                return [first]
            if n == 2:  # a tuple, so an op block with a flat tuple output returns it as is
                vd.append(d)
                vd.append(d)
                return (first, first + 1)
            vd.extend([d] * n)
            return tuple(range(first, first + n))

        return apply

    def constant_adder(self, ttype: TensorType) -> Callable[[Any], int]:
        """``constant`` for one type, with its lists bound: ``f(payload) -> value id``."""
        tid = self.type_id(ttype)
        vd, vids, payloads = self.val_depth, self.const_vids[tid], self.const_payloads[tid]

        def add(payload: Any) -> int:
            vid = len(vd)
            vd.append(0)
            vids.append(vid)
            payloads.append(payload)
            return vid

        return add

    def metric(self, name: str, value: int) -> None:
        inputs, vids = self.metrics.setdefault(name, ([], []))
        inputs.append(self.current_input)
        vids.append(value)

    # ---- facts ----------------------------------------------------------------------------------
    @property
    def num_values(self) -> int:
        return len(self.val_depth)

    @property
    def max_depth(self) -> int:
        return max(self.val_depth, default=0)


def trace_batch(
    block: Block,
    ops: Sequence[Op],
    inputs: Sequence[Any],
    output_type: Type,
    fuse: bool = False,
) -> tuple[Trace, np.ndarray]:
    """Traces ``block`` over every input into one ``Trace`` (``fuse``: pipes' runs of op blocks
    as fused ops, which ``ops`` must include).

    Returns the trace and an ``(len(inputs), k)`` array of the value ids of each input's ``k``
    output tensors (the root output flattened).

    Raises:
        InputError: naming the input's position in the batch and the path inside it.
    """
    tr = Trace(ops)
    void = isinstance(output_type, VoidType)
    flatten = None if void else structure_flattener(output_type)
    outs: list[list[int]] = []
    run = native_trace_fn(block, tr, fuse=fuse)
    values = tr.val_depth
    for k, x in enumerate(inputs):
        tr.current_input = k
        start = len(values)
        try:
            try:
                out = run(x)
            except RecursionError:
                # Too deep for the closures' Python recursion: trace this input again with an
                # explicit stack (the same values, in the same order).
                tr.rollback(start)
                out = run_steps(block, tr, x, fuse)
        except InputError as e:
            e.path.insert(0, k)
            raise
        if not void:
            outs.append(flatten(out))  # type: ignore[misc]
    width = 0 if void else len(outs[0]) if outs else 0
    out_vids = np.asarray(outs, dtype=np.int64).reshape(len(inputs) if not void else 0, width)
    return tr, out_vids


class _CheckingTracer:
    """A tracer that records nothing and checks what the scheduler checks batch-wide: ids read
    from the input into a table (``Op.check_ids``); the blocks check the rest (``Scalar``'s
    integer range) in their ``_trace``."""

    def __init__(self) -> None:
        self._count = itertools.count()
        self._scalars: dict[int, Any] = {}  # value id → payload of a scalar constant

    def constant(self, ttype: TensorType, payload: Any) -> int:
        vid = next(self._count)
        if not ttype.shape:
            self._scalars[vid] = payload
        return vid

    def zeros(self, ttype: TensorType) -> int:
        return next(self._count)

    def apply(self, op: Op, args: list[int]) -> list[int]:
        if op.id_limit is not None and args[0] in self._scalars:
            op.check_ids(self._scalars[args[0]])
        return [next(self._count) for _ in range(op.n_out)]

    def metric(self, name: str, value: int) -> None:
        pass


def locate_input_error(block: Block, inputs: Sequence[Any]) -> InputError | None:
    """The ``InputError`` of the first input that fails the per-value checks the hot path leaves
    to the scheduler (``schedule.InvalidInput``), with its position and path; ``None`` if none
    fails. Traces unfused, so that the error names the user's block, never a fused run."""
    tr = _CheckingTracer()
    for k, x in enumerate(inputs):
        try:
            run_steps(block, tr, x)
        except InputError as e:
            e.path.insert(0, k)
            return e
    return None
