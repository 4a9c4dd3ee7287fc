"""Depth-independent tracing: structural blocks as generators, driven by an explicit stack.

A block's ``_trace`` calls its children's ``_trace``, and the compiler's closures
(``_closures.py``) call each other the same way, so tracing an input nests a few Python frames
per level of the input: a chain tree of ~150 levels reaches Python's recursion limit. Here every
block that traces children has a *step function*, a generator doing what its ``_trace`` does,
except that where ``_trace`` calls ``child._trace(tr, v)`` it yields ``(child, v)`` and is sent
the child's output (or thrown the child's error). ``run_steps`` keeps the generators of the
blocks being traced on a list instead of the Python stack, so an input of any depth takes the
same few frames.

Users of it: the eager oracle (``Block.eval``, ``max_depth``: every input, since ops run as they
are traced and cannot be traced twice) and the compiler, for an input that is too deep for its
closures (it catches the ``RecursionError``, forgets that input's partial trace and traces it
again here). Blocks without a step function (tensor blocks, ``GetItem``, user blocks overriding
``_trace``) are leaves: ``run_steps`` calls their ``_trace``, whose recursion does not grow with
the input.

A step function must do exactly what its block's ``_trace`` does, errors included (a block
whose class overrides ``_trace`` is a leaf, as it is for the closures). With ``fuse``, pipes
trace their runs of op blocks as fused ops wherever the compiler's closures would
(``_fusion.py``), so a deep input records the ops the closures would have recorded.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

from foldexp.blocks._base import Block, InputError, Pipe, Tracer
from foldexp.blocks._closures import _MAKERS
from foldexp.blocks._composition import _ITEM, _TUPLE, _WHOLE, Composition
from foldexp.blocks._fusion import fused_blocks
from foldexp.blocks._recursion import _ForwardRef
from foldexp.blocks._sequence_plumbing import ZipWith
from foldexp.blocks._sequences import RNN, Fold, Map, Reduce, Repeat, as_list
from foldexp.blocks._structure import AllOf, OneOf, Optional, Record

__all__ = ["run_steps"]

# A step function yields ``(child block, child input)`` and returns the block's output.
Steps = Generator[tuple[Block, Any], Any, Any]
StepFn = Callable[[Any, Tracer, Any, bool], Steps]


def run_steps(block: Block, tr: Tracer, x: Any, fuse: bool = False) -> Any:
    """``block._trace(tr, x)``, in constant Python stack depth whatever the depth of ``x``.

    With ``fuse``, pipes reached as the compiler's closures reach them trace their runs of op
    blocks as fused ops (the compiler must know those ops: ``collect_ops(root, fuse=True)``).
    An ``InputError`` raised by a tracer (not by a block) gets the leaf block it came from.
    """
    # One entry per block being traced: its generator, and whether its children fuse.
    stack: list[tuple[Steps, bool]] = []
    call: tuple[Block, Any] | None = (block, x)
    call_fuse = fuse
    value: Any = None
    error: Exception | None = None
    while True:
        if call is not None:
            child, arg = call
            entry = _step_fn(type(child))
            if entry is None:
                try:
                    value = child._trace(tr, arg)
                except InputError as e:
                    if e.block is None:
                        e.block = child
                    error = e
                except Exception as e:  # handed to the parents, which may add to its path
                    error = e
            else:
                make, closure = entry
                # Only blocks with a tracing closure trace their children through closures, and
                # only closures fuse; anything traced by ``_trace`` runs the unfused ops.
                stack.append((make(child, tr, arg, call_fuse), call_fuse and closure))
                value = None
        if not stack:
            if error is not None:
                raise error
            return value
        gen, call_fuse = stack[-1]
        try:
            if error is None:
                call = gen.send(value)
            else:
                thrown, error = error, None
                call = gen.throw(thrown)
        except StopIteration as stop:
            stack.pop()
            call, value = None, stop.value
        except Exception as e:
            stack.pop()
            call, error = None, e


_resolved: dict[type, tuple[StepFn, bool] | None] = {}


def _step_fn(cls: type) -> tuple[StepFn, bool] | None:
    """The step function of blocks of class ``cls`` (``None``: a leaf) and whether the closures
    trace such a block's children through closures (so that they fuse)."""
    try:
        return _resolved[cls]
    except KeyError:
        pass
    found = None
    for base in cls.__mro__:
        fn = _STEPS.get(base)
        if fn is not None:
            if cls._trace is base._trace:  # a subclass overriding ``_trace`` is a leaf
                found = (fn, base in _MAKERS)
            break
    _resolved[cls] = found
    return found


def _pipe(b: Pipe, tr: Tracer, x: Any, fuse: bool) -> Steps:
    for c in fused_blocks(b) if fuse else b.blocks:
        x = yield c, x
    return x


def _record(b: Record, tr: Tracer, x: Any, fuse: bool) -> Steps:
    out = []
    for k, c in b.fields:
        try:
            item = x[k]
        except (KeyError, IndexError, TypeError) as e:
            raise InputError(b, f"input has no field {k!r}: {e}") from e
        try:
            out.append((yield c, item))
        except InputError as e:
            e.path.insert(0, k)
            raise
    return tuple(out)


def _all_of(b: AllOf, tr: Tracer, x: Any, fuse: bool) -> Steps:
    out = []
    for c in b.blocks:
        out.append((yield c, x))
    return tuple(out)


def _one_of(b: OneOf, tr: Tracer, x: Any, fuse: bool) -> Steps:
    try:
        key = b.key_fn(x)
    except RecursionError:
        raise
    except Exception as e:
        raise InputError(b, f"key_fn failed: {type(e).__name__}: {e}") from e
    case = b.cases.get(key)
    if case is None:
        raise InputError(b, f"key {key!r} matches no case; cases are {list(b.cases)}")
    if b.pre_block is not None:
        x = yield b.pre_block, x
    return (yield case, x)


def _optional(b: Optional, tr: Tracer, x: Any, fuse: bool) -> Steps:
    if x is None:
        return (yield b.none_case, None)
    return (yield b.some_case, x)


def _forward_ref(b: _ForwardRef, tr: Tracer, x: Any, fuse: bool) -> Steps:
    return (yield b.decl.block, x)


def _map(b: Map, tr: Tracer, x: Any, fuse: bool) -> Steps:
    elem = b.elem_block
    if b._broadcast:
        return Repeat((yield elem, x.value))
    out = []
    for i, item in enumerate(as_list(b, x)):
        try:
            out.append((yield elem, item))
        except InputError as e:
            e.path.insert(0, i)
            raise
    return out


def _fold(b: Fold, tr: Tracer, x: Any, fuse: bool) -> Steps:
    state = yield b.start_block, None
    for i, item in enumerate(as_list(b, x)):
        try:
            state = yield b.combine_block, (state, item)
        except InputError as e:
            e.path.insert(0, i)
            raise
    return state


def _rnn(b: RNN, tr: Tracer, x: Any, fuse: bool) -> Steps:
    if b.initial_state_from_input:
        xs, state = x
    else:
        xs, state = x, (yield b.initial_state, None)
    outs = []
    for i, item in enumerate(as_list(b, xs)):
        try:
            y, state = yield b.cell, (item, state)
        except InputError as e:
            e.path.insert(0, i)
            if b.initial_state_from_input:
                e.path.insert(0, 0)
            raise
        outs.append(y)
    return outs, state


def _reduce(b: Reduce, tr: Tracer, x: Any, fuse: bool) -> Steps:
    items = as_list(b, x)
    if not items:
        if b.default_block is None:
            raise InputError(b, "cannot reduce an empty sequence (give a default_block)")
        return (yield b.default_block, None)
    while len(items) > 1:
        nxt = []
        for i in range(0, len(items) - 1, 2):
            nxt.append((yield b.combine_block, (items[i], items[i + 1])))
        if len(items) % 2:
            nxt.append(items[-1])
        items = nxt
    return items[0]


def _zip_with(b: ZipWith, tr: Tracer, x: Any, fuse: bool) -> Steps:
    zipped = yield b._zip, x
    return (yield b._map, zipped)


def _composition(b: Composition, tr: Tracer, x: Any, fuse: bool) -> Steps:
    vals = [x]
    for block, kind, a, c in b._steps:
        if kind == _WHOLE:
            v = vals[a]
        elif kind == _ITEM:
            v = b._item(block, vals[a], c, a == 0)
        elif kind == _TUPLE:
            v = b._tuple(block, vals, a)
        else:
            v = None
        try:
            vals.append((yield block, v))
        except InputError as e:
            if kind == _ITEM and a == 0:
                e.path.insert(0, c)  # the node read this item of the input
            raise
    kind, a, c = b._out
    if kind == _WHOLE:
        return vals[a]
    if kind == _ITEM:
        return b._item(b.output, vals[a], c, a == 0)
    if kind == _TUPLE:
        return b._tuple(b.output, vals, a)
    return None


_STEPS: dict[type, StepFn] = {
    Pipe: _pipe,
    Record: _record,
    AllOf: _all_of,
    OneOf: _one_of,
    Optional: _optional,
    _ForwardRef: _forward_ref,
    Map: _map,
    Fold: _fold,
    RNN: _rnn,
    Reduce: _reduce,
    ZipWith: _zip_with,
    Composition: _composition,
}
