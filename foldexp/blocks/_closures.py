"""Tracing closures: the compiler's fast path for walking blocks over a batch.

Tracing visits every node of every input, so a batch of SST trees means tens of thousands of
``_trace`` calls, each paying attribute lookups and method dispatch. ``trace_fn(block, tr)``
instead builds, once per batch, a tree of closures mirroring the block tree, with children's
closures and the tracer's methods bound as locals.

A closure must do exactly what the block's ``_trace`` does, errors included. The eager oracle
(``_eager.py``) walks blocks with ``_steps.py``'s step functions, which do what ``_trace`` does
too, so the batched == eager checks cover all three. Only a block
whose class still has the ``_trace`` a closure was written for gets that closure; any other block
(a subclass overriding ``_trace``, a user block) gets a wrapper around its own ``_trace``.

Closures call each other, a few Python frames per level of the input, so an input deeper than
~150 levels raises ``RecursionError``; ``trace_batch`` then traces it again with ``_steps.py``'s
explicit stack. Closures must therefore let a ``RecursionError`` through, never turn it into an
``InputError``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from foldexp.blocks._base import Block, InputError, Pipe, Tracer
from foldexp.blocks._fusion import fused_blocks
from foldexp.blocks._metrics import Metric
from foldexp.blocks._recursion import _ForwardRef
from foldexp.blocks._sequences import Fold, Map, Repeat, _as_list
from foldexp.blocks._structure import (
    AllOf,
    GetItem,
    Identity,
    InputTransform,
    OneOf,
    Record,
)
from foldexp.blocks._tensors import _NUMBER_TYPES, OpBlock, Scalar
from foldexp.types import TensorType

__all__ = ["Memo", "closure_class", "trace_fn"]

Fn = Callable[[Any], Any]


class Memo:
    """What one closure build shares: the declarations' closures (to close recursive loops) and
    whether pipes trace their fused runs (``_fusion.py``)."""

    def __init__(self, fuse: bool) -> None:
        self.fuse = fuse
        self.decls: dict[int, list[Fn]] = {}


def trace_fn(block: Block, tr: Tracer, memo: Memo | None = None, *, fuse: bool = False) -> Fn:
    """A function ``x -> traced output`` doing ``block._trace(tr, x)``, faster.

    With ``fuse``, each ``Pipe`` traces its runs of op blocks as one fused op (the compiler
    must then know those ops: ``collect_ops(root, fuse=True)``).
    """
    memo = Memo(fuse) if memo is None else memo
    cls = closure_class(block)
    if cls is not None:
        return _MAKERS[cls](block, tr, memo)
    trace = block._trace
    return lambda x: trace(tr, x)


def closure_class(block: Block) -> type | None:
    """The class whose closure traces ``block``: the nearest in its MRO with a closure here
    whose ``_trace`` the block still has; ``None``: the block is traced by its own ``_trace``."""
    for cls in type(block).__mro__:
        if cls in _MAKERS and type(block)._trace is cls._trace:
            return cls
    return None


def _pipe(b: Pipe, tr: Tracer, memo: Memo) -> Fn:
    blocks = fused_blocks(b) if memo.fuse else b.blocks
    fns = [trace_fn(c, tr, memo) for c in blocks]
    head = blocks[0]
    if len(fns) > 1 and type(head) is GetItem:
        # ``GetItem(k) >> ...`` (a tree's child, a leaf's word) indexes inline: one call less
        # per node. A failing index goes through the GetItem's closure, which raises its error.
        key, get, rest = head.key, fns[0], _chain(fns[1:])

        def run_indexed(x: Any) -> Any:
            try:
                item = x[key]
            except (IndexError, KeyError, TypeError):
                item = get(x)
            return rest(item)

        return run_indexed
    return _chain(fns)


def _chain(fns: list[Fn]) -> Fn:
    """``x -> fns[-1](...fns[0](x))``, unrolled for the short pipes that trees are made of."""
    if len(fns) == 1:
        return fns[0]
    if len(fns) == 2:
        first, second = fns
        return lambda x: second(first(x))
    if len(fns) == 3:
        first, second, third = fns
        return lambda x: third(second(first(x)))

    def run(x: Any) -> Any:
        for f in fns:
            x = f(x)
        return x

    return run


def _op_block(b: OpBlock, tr: Tracer, memo: Memo) -> Fn:
    op, flatten, build = b.op, b._flatten, b._build
    applier = getattr(tr, "applier", None)
    if applier is None:
        apply = tr.apply
        if b._single:
            return lambda x: apply(op, flatten(x))[0]
        return lambda x: build(apply(op, flatten(x)))
    one_input = isinstance(op.input_type, TensorType)
    if b._single and one_input:  # (not a 1-tuple input, whose value is a tuple)
        return applier(op, single=True)  # vid -> vid, no lists
    run = applier(op)
    if b._single:
        return lambda x: run(flatten(x))[0]
    if build is tuple and op.n_out > 1:  # a flat tuple out: the applier's tuple is the value
        return (lambda x: run([x])) if one_input else (lambda x: run(flatten(x)))
    return lambda x: build(run(flatten(x)))


def _scalar(b: Scalar, tr: Tracer, memo: Memo) -> Fn:
    out_type, floating = b._output_type, b._floating
    adder = getattr(tr, "constant_adder", None)
    add = adder(out_type) if adder is not None else lambda x: tr.constant(out_type, x)

    def run(x: Any) -> Any:
        if not isinstance(x, _NUMBER_TYPES) or (not floating and isinstance(x, float)):
            return b._trace(tr, x)  # raises the block's own error
        return add(x)

    return run


def _identity(b: Identity, tr: Tracer, memo: Memo) -> Fn:
    return lambda x: x


def _input_transform(b: InputTransform, tr: Tracer, memo: Memo) -> Fn:
    fn = b.py_fn

    def run(x: Any) -> Any:
        try:
            return fn(x)
        except RecursionError:
            raise  # the input is too deep for closures: ``trace_batch`` traces it again
        except Exception:
            return b._trace(tr, x)  # raises the block's own error

    return run


def _get_item(b: GetItem, tr: Tracer, memo: Memo) -> Fn:
    key = b.key

    def run(x: Any) -> Any:
        try:
            return x[key]
        except (IndexError, KeyError, TypeError):
            return b._trace(tr, x)

    return run


def _record(b: Record, tr: Tracer, memo: Memo) -> Fn:
    fields = [(k, trace_fn(c, tr, memo)) for k, c in b.fields]

    def run(x: Any) -> Any:
        out = []
        for k, f in fields:
            try:
                item = x[k]
            except (KeyError, IndexError, TypeError):
                return b._trace(tr, x)  # raises the block's own error
            try:
                out.append(f(item))
            except InputError as e:
                e.path.insert(0, k)
                raise
        return tuple(out)

    return run


def _all_of(b: AllOf, tr: Tracer, memo: Memo) -> Fn:
    fns = [trace_fn(c, tr, memo) for c in b.blocks]
    if len(fns) == 2:
        first, second = fns
        return lambda x: (first(x), second(x))
    return lambda x: tuple([f(x) for f in fns])


def _one_of(b: OneOf, tr: Tracer, memo: Memo) -> Fn:
    cases = {k: trace_fn(c, tr, memo) for k, c in b.cases.items()}
    key_fn = b.key_fn
    pre = trace_fn(b.pre_block, tr, memo) if b.pre_block is not None else None

    def run(x: Any) -> Any:
        try:
            case = cases.get(key_fn(x))
        except RecursionError:
            raise  # the input is too deep for closures: ``trace_batch`` traces it again
        except Exception:
            case = None
        if case is None:
            return b._trace(tr, x)  # raises the block's own error
        return case(x) if pre is None else case(pre(x))

    return run


def _forward_ref(b: _ForwardRef, tr: Tracer, memo: Memo) -> Fn:
    # The declaration's closure is built once; uses inside it (recursion) find the cell filled
    # by the time they run.
    cell = memo.decls.get(id(b.decl))
    if cell is None:
        cell = memo.decls[id(b.decl)] = []
        cell.append(trace_fn(b.decl.block, tr, memo))  # type: ignore[arg-type]
    if cell:
        return cell[0]
    return lambda x: cell[0](x)


def _map(b: Map, tr: Tracer, memo: Memo) -> Fn:
    elem = trace_fn(b.elem_block, tr, memo)
    if b._broadcast:
        return lambda x: Repeat(elem(x.value))

    def run(x: Any) -> Any:
        items = _as_list(b, x)
        out: list[Any] = []
        try:  # once per sequence, not per item; the failing item's index is len(out)
            for item in items:
                out.append(elem(item))
        except InputError as e:
            e.path.insert(0, len(out))
            raise
        return out

    return run


def _fold(b: Fold, tr: Tracer, memo: Memo) -> Fn:
    start, combine = trace_fn(b.start_block, tr, memo), trace_fn(b.combine_block, tr, memo)

    def run(x: Any) -> Any:
        items = _as_list(b, x)
        state = start(None)
        i = 0
        try:
            for i, item in enumerate(items):  # noqa: B007 (i is read by the except clause)
                state = combine((state, item))
        except InputError as e:
            e.path.insert(0, i)
            raise
        return state

    return run


def _metric(b: Metric, tr: Tracer, memo: Memo) -> Fn:
    record, name = tr.metric, b.metric_name

    def run(x: Any) -> None:
        record(name, x)

    return run


_MAKERS: dict[type, Callable[[Any, Tracer, Memo], Fn]] = {
    Pipe: _pipe,
    OpBlock: _op_block,
    Scalar: _scalar,
    Identity: _identity,
    InputTransform: _input_transform,
    GetItem: _get_item,
    Record: _record,
    AllOf: _all_of,
    OneOf: _one_of,
    _ForwardRef: _forward_ref,
    Metric: _metric,
    Map: _map,
    Fold: _fold,
}
