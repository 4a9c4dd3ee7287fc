"""``Composition``: blocks wired into a directed acyclic graph (the paper's §3.4, Appendix A).

``>>`` chains blocks; a composition lets one value feed several blocks and a block read several
values::

    c = Composition()
    with c.scope():
        h = c.input
        e = Map(a).reads(h)                       # one source: its value as it is
        alpha = ZipWith(Function(div)).reads(e, (Sum() >> Broadcast()).reads(e))  # a tuple
        c.output.reads(alpha)

Each node is one block; ``block[i]`` (and ``c.input[i]``) reads item ``i`` of a tuple output.
Wiring is checked as it is made (a cycle or a second wiring of one block is an error at once);
types are inferred in topological order when the composition is typed, and then every output
must be read by someone (or be void) and the composition must have an output.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from foldexp.blocks._base import Block, InputError, Tracer, Wire, convert_to_block
from foldexp.types import PyObjectType, TupleType, Type, VoidType

__all__ = ["Composition", "current_composition"]

_scopes = threading.local()


def _stack() -> list[Composition]:
    stack = getattr(_scopes, "stack", None)
    if stack is None:
        stack = _scopes.stack = []
    return stack


def current_composition(block: Block) -> Composition:
    """The composition whose ``scope()`` is innermost (``RuntimeError`` if none)."""
    stack = _stack()
    if not stack:
        raise RuntimeError(
            f"{block!r}.reads(...) can only be used inside `with composition.scope():`"
        )
    return stack[-1]


class _Port(Block):
    """``Composition.input`` or ``Composition.output``: a wiring endpoint, never run itself."""

    def __init__(self, owner: Composition, side: str) -> None:
        super().__init__()
        self.owner, self.side = owner, side

    def _trace(self, tr: Tracer, x: Any) -> Any:
        raise RuntimeError(f"{self!r} is a wiring endpoint and is never run")

    def __repr__(self) -> str:
        return f"{self.owner!r}.{self.side}"


# How a node gets its input from the values computed so far (``vals[0]`` is the composition's
# input, ``vals[k]`` the output of the k-th node in topological order).
_NONE, _WHOLE, _ITEM, _TUPLE = range(4)


class Composition(Block):
    """A DAG of blocks, wired with ``reads`` inside ``with composition.scope():``.

    ``input`` is the composition's input (``input[i]`` its item ``i``); ``output.reads(...)``
    sets its output (several sources make a tuple; none makes it void).
    """

    def __init__(self, name: str | None = None) -> None:
        super().__init__(name=name)
        self.input = _Port(self, "input")
        self.output = _Port(self, "output")
        self._nodes: list[Block] = []  # in order of first appearance
        self._node_ids: set[int] = set()
        self._wires: dict[int, tuple[Wire, ...]] = {}  # id(node) → the wires it reads
        self._output_wires: tuple[Wire, ...] | None = None
        self._steps: list[tuple[Block, int, Any, Any]] = []
        self._out: tuple[int, Any, Any] = (_NONE, None, None)

    @contextmanager
    def scope(self) -> Iterator[Composition]:
        """Within this context, ``block.reads(...)`` wires blocks into this composition."""
        stack = _stack()
        stack.append(self)
        try:
            yield self
        finally:
            stack.pop()

    # ---- wiring -----------------------------------------------------------------------------
    def connect(self, sources: Any, block: Any) -> None:
        """Wires ``sources`` (a block, a wire ``b[i]``, or a tuple/list of them) into ``block``.

        Raises:
            ValueError: for a cycle, a block wired twice, writing to ``input``, reading from
                ``output``, or a port of another composition.
        """
        block = convert_to_block(block)
        srcs = sources if isinstance(sources, (tuple, list)) else (sources,)
        wires = tuple(self._as_wire(s) for s in srcs)
        if isinstance(block, _Port):
            if block.owner is not self:
                raise ValueError(f"{block!r} belongs to another composition than {self!r}")
            if block.side == "input":
                raise ValueError(f"{self!r}: cannot wire anything into {block!r}")
            if self._output_wires is not None:
                raise ValueError(f"{self!r}: its output is already wired")
            self._output_wires = wires
            return
        if id(block) in self._wires:
            raise ValueError(f"{self!r}: the input of {block!r} is already wired")
        for w in wires:
            cycle = self._path_up(w.block, block)
            if cycle is not None:
                loop = " -> ".join(repr(b) for b in [block, *cycle])
                raise ValueError(
                    f"{self!r}: wiring {block!r} to read {w.block!r} makes a cycle ({loop}); "
                    "a composition must be acyclic"
                )
        self._add(block)
        self._wires[id(block)] = wires

    def _as_wire(self, source: Any) -> Wire:
        w = source if isinstance(source, Wire) else Wire(convert_to_block(source), None)
        if isinstance(w.block, _Port):
            if w.block.owner is not self:
                raise ValueError(f"{w.block!r} belongs to another composition than {self!r}")
            if w.block.side == "output":
                raise ValueError(f"{self!r}: cannot read from its own output")
        else:
            self._add(w.block)
        return w

    def _add(self, block: Block) -> None:
        if id(block) not in self._node_ids:
            self._node_ids.add(id(block))
            self._nodes.append(block)

    def _path_up(self, start: Block, target: Block) -> list[Block] | None:
        """A path ``start → … → target`` following what each node reads, if there is one."""
        stack: list[tuple[Block, list[Block]]] = [(start, [start])]
        seen: set[int] = set()
        while stack:
            b, path = stack.pop()
            if b is target:
                return path
            if id(b) in seen:
                continue
            seen.add(id(b))
            for w in self._wires.get(id(b), ()):
                stack.append((w.block, [*path, w.block]))
        return None

    # ---- typing -----------------------------------------------------------------------------
    def _order(self) -> list[Block]:
        order: list[Block] = []
        done: set[int] = set()

        def visit(b: Block) -> None:
            # Recursion depth is the longest chain of nodes; compositions are small.
            done.add(id(b))
            for w in self._wires.get(id(b), ()):
                if not isinstance(w.block, _Port) and id(w.block) not in done:
                    visit(w.block)
            order.append(b)

        for w in self._output_wires or ():
            if not isinstance(w.block, _Port) and id(w.block) not in done:
                visit(w.block)
        for b in self._nodes:
            if id(b) not in done:
                visit(b)
        return order

    def _wire_type(self, w: Wire, types: dict[int, Type]) -> Type:
        t = types[id(w.block)]
        if w.index is None or isinstance(t, PyObjectType):
            return t
        if isinstance(t, TupleType):
            try:
                item = t.items[w.index]
            except (IndexError, TypeError):
                pass
            else:
                return TupleType(*item) if isinstance(w.index, slice) else item
        raise TypeError(
            f"{self!r}: {w!r} reads item {w.index!r} of {w.block!r}, which outputs {t!r}"
        )

    def _input_type_of(self, wires: tuple[Wire, ...], types: dict[int, Type]) -> Type:
        if not wires:
            return VoidType()
        if len(wires) == 1:
            return self._wire_type(wires[0], types)
        return TupleType(*[self._wire_type(w, types) for w in wires])

    def _infer(self, input_type: Type) -> Type:
        if self._output_wires is None:
            raise TypeError(
                f"{self!r} has no output: call .output.reads(...) inside its scope "
                "(.output.reads() with nothing for a void output)"
            )
        order = self._order()
        types: dict[int, Type] = {id(self.input): input_type}
        for b in order:
            t = self._input_type_of(self._wires.get(id(b), ()), types)
            try:
                types[id(b)] = b.infer(t)
            except TypeError as e:
                raise TypeError(f"in {self!r}: {e}") from None
        out = self._input_type_of(self._output_wires, types)
        read = {id(w.block) for ws in [*self._wires.values(), self._output_wires] for w in ws}
        for b in order:
            if id(b) not in read and not isinstance(types[id(b)], VoidType):
                raise TypeError(
                    f"{self!r}: the output of {b!r} ({types[id(b)]!r}) is never read; wire it "
                    "into another block or the composition's output"
                )
        position = {id(self.input): 0} | {id(b): k for k, b in enumerate(order, 1)}
        self._steps = [(b, *self._getter(self._wires.get(id(b), ()), position)) for b in order]
        self._out = self._getter(self._output_wires, position)
        self._nodes = order
        return out

    @staticmethod
    def _getter(wires: tuple[Wire, ...], position: dict[int, int]) -> tuple[int, Any, Any]:
        if not wires:
            return _NONE, None, None
        if len(wires) == 1:
            w = wires[0]
            j = position[id(w.block)]
            return (_WHOLE, j, None) if w.index is None else (_ITEM, j, w.index)
        return _TUPLE, tuple((position[id(w.block)], w.index) for w in wires), None

    def children(self) -> list[Block]:
        return list(self._nodes)

    # ---- tracing (the hot path) -------------------------------------------------------------
    def _trace(self, tr: Tracer, x: Any) -> Any:
        vals = [x]
        for block, kind, a, b in self._steps:
            if kind == _WHOLE:
                v = vals[a]
            elif kind == _ITEM:
                v = self._item(block, vals[a], b, a == 0)
            elif kind == _TUPLE:
                v = self._tuple(block, vals, a)
            else:
                v = None
            try:
                vals.append(block._trace(tr, v))
            except InputError as e:
                if kind == _ITEM and a == 0:
                    e.path.insert(0, b)  # the node read this item of the input
                raise
        kind, a, b = self._out
        if kind == _WHOLE:
            return vals[a]
        if kind == _ITEM:
            return self._item(self.output, vals[a], b, a == 0)
        if kind == _TUPLE:
            return self._tuple(self.output, vals, a)
        return None

    def _tuple(self, reader: Block, vals: list[Any], wires: tuple[tuple[int, Any], ...]) -> Any:
        try:
            return tuple([vals[j] if i is None else vals[j][i] for j, i in wires])
        except (IndexError, KeyError, TypeError):  # again, one by one, to name what was missing
            return tuple(
                [vals[j] if i is None else self._item(reader, vals[j], i, j == 0) for j, i in wires]
            )

    def _item(self, reader: Block, value: Any, index: Any, from_input: bool) -> Any:
        try:
            return value[index]
        except (IndexError, KeyError, TypeError) as e:
            if not from_input:
                raise
            raise InputError(reader, f"reads item {index!r} of the input {value!r}: {e}") from None
