"""Blocks over sequences: ``Map``, ``Fold`` (a left fold, as an RNN unrolls), ``RNN`` (a fold
that also emits an output per element) and ``Reduce`` (a balanced binary reduction, depth
⌈log2 n⌉).

A sequence value is a Python list; an endless broadcast sequence (``Broadcast``) is a
``Repeat`` holding its one value. A homogeneous tuple counts as a sequence too, as in TF Fold
(``ZipWith(Sum())`` sums pairs).
"""

from __future__ import annotations

from typing import Any

from foldexp.blocks._base import (
    Block,
    InputError,
    Tracer,
    convert_to_block,
)
from foldexp.types import (
    BroadcastSequenceType,
    PyObjectType,
    SequenceType,
    TupleType,
    Type,
    VoidType,
)

__all__ = ["Map", "Fold", "RNN", "Reduce", "Repeat", "element_type", "as_list"]


class Repeat:
    """The value of a broadcast sequence: ``value``, endlessly; zipping fixes its length."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"Repeat({self.value!r})"


def element_type(block: Block, t: Type, finite: bool = False, what: str = "a sequence") -> Type:
    """The element type of a sequence-like input type (``TypeError`` naming ``block`` if none).

    A sequence gives its item type, a Python object gives Python objects, a non-empty tuple whose
    items all have one type gives that type. With ``finite``, a broadcast sequence is an error:
    folding or reducing an endless sequence would never end.
    """
    if isinstance(t, SequenceType):
        if finite and isinstance(t, BroadcastSequenceType):
            raise TypeError(
                f"{block!r} cannot run over an endless broadcast sequence {t!r}; zip it with a "
                "finite sequence first"
            )
        return t.item_type
    if isinstance(t, PyObjectType):
        return t
    if isinstance(t, TupleType) and t.items and all(i == t.items[0] for i in t.items):
        return t.items[0]
    raise TypeError(f"{block!r} expects {what} as input, got {t!r}")


def as_list(block: Block, x: Any) -> list[Any]:
    """A sequence input as a list (``InputError`` naming ``block`` if it is not iterable)."""
    if isinstance(x, list):
        return x
    try:
        return list(x)
    except TypeError:
        raise InputError(block, f"expected a sequence, got {x!r} ({type(x).__name__})") from None


_as_list = as_list


class Map(Block):
    """Applies ``elem_block`` to every element of a sequence; outputs the sequence of results.

    Over a broadcast sequence the block runs once and the result is broadcast.
    """

    def __init__(self, elem_block: Any, name: str | None = None) -> None:
        super().__init__(name=name)
        self.elem_block = convert_to_block(elem_block)
        self._broadcast = False

    def _infer(self, input_type: Type) -> Type:
        item = element_type(self, input_type)
        out = self.elem_block.infer(item)
        self._broadcast = isinstance(input_type, BroadcastSequenceType)
        return BroadcastSequenceType(out) if self._broadcast else SequenceType(out)

    def children(self) -> list[Block]:
        return [self.elem_block]

    def _trace(self, tr: Tracer, x: Any) -> Any:
        b = self.elem_block
        if self._broadcast:
            return Repeat(b._trace(tr, x.value))
        out = []
        for i, item in enumerate(_as_list(self, x)):
            try:
                out.append(b._trace(tr, item))
            except InputError as e:
                e.path.insert(0, i)
                raise
        return out

    def _repr_args(self) -> str:
        return repr(self.elem_block)


class Fold(Block):
    """Left fold: ``state = initial(); state = combine((state, x_i))`` for each element.

    ``combine_block`` takes a pair ``(state, element)`` and returns a new state of the same type;
    ``start_block`` receives no input (``VoidType``) — e.g. ``Zeros(state_size)``.
    """

    def __init__(self, combine_block: Any, start_block: Any, name: str | None = None) -> None:
        super().__init__(name=name)
        self.combine_block = convert_to_block(combine_block)
        self.start_block = convert_to_block(start_block)

    def _infer(self, input_type: Type) -> Type:
        item = element_type(self, input_type, finite=True)
        state = self.start_block.infer(VoidType())
        try:
            new_state = self.combine_block.infer(TupleType(state, item))
        except TypeError as e:
            raise TypeError(
                f"{self!r}: the combine block must take a pair (state {state!r}, element "
                f"{item!r}): {e}"
            ) from None
        if new_state != state:
            raise TypeError(
                f"{self!r}: the combine block returns {new_state!r} but the state is {state!r}"
            )
        return state

    def children(self) -> list[Block]:
        return [self.start_block, self.combine_block]

    def _trace(self, tr: Tracer, x: Any) -> Any:
        state = self.start_block._trace(tr, None)
        combine = self.combine_block
        for i, item in enumerate(_as_list(self, x)):
            try:
                state = combine._trace(tr, (state, item))
            except InputError as e:
                e.path.insert(0, i)
                raise
        return state

    def _repr_args(self) -> str:
        return f"{self.combine_block!r}, {self.start_block!r}"


class RNN(Block):
    """Runs ``cell`` along a sequence: ``(y_i, state) = cell((x_i, state))``; outputs
    ``([y_1, …, y_n], final state)``.

    Args:
        cell: a block (or ``nn.Module``) from ``(element, state)`` to ``(output, state)``.
        initial_state: the first state: a block given no input (e.g. ``Zeros(16)``), or a
            size/type for zeros. By default zeros of the state type the cell declares
            (``Function(cell, output_type=TupleType(out, state))``).
        initial_state_from_input: take ``(sequence, initial state)`` as input instead.
    """

    def __init__(
        self,
        cell: Any,
        initial_state: Any = None,
        initial_state_from_input: bool = False,
        name: str | None = None,
    ) -> None:
        if initial_state_from_input and initial_state is not None:
            raise ValueError("RNN: initial_state cannot be given with initial_state_from_input")
        super().__init__(name=name)
        self.cell = convert_to_block(cell)
        self.initial_state_from_input = initial_state_from_input
        if initial_state is not None and not isinstance(initial_state, Block):
            from foldexp.blocks._tensors import Zeros

            initial_state = Zeros(initial_state)
        self.initial_state: Block | None = initial_state
        self._initial_given = initial_state is not None

    def _infer(self, input_type: Type) -> Type:
        if self.initial_state_from_input:
            if not (isinstance(input_type, TupleType) and len(input_type) == 2):
                raise TypeError(
                    f"{self!r} expects a pair (sequence, initial state) as input, "
                    f"got {input_type!r}"
                )
            seq_type, state = input_type.items
        else:
            seq_type = input_type
            if self.initial_state is None:
                out = self.cell.output_type
                if not (isinstance(out, TupleType) and len(out) == 2):
                    raise TypeError(
                        f"{self!r}: cannot tell the state type of the cell {self.cell!r}; give "
                        "initial_state (e.g. Zeros(size)) or declare the cell's output type"
                    )
                from foldexp.blocks._tensors import Zeros

                self.initial_state = Zeros(out[1])
            state = self.initial_state.infer(VoidType())
        item = element_type(self, seq_type, finite=True)
        try:
            out = self.cell.infer(TupleType(item, state))
        except TypeError as e:
            raise TypeError(
                f"{self!r}: the cell must take a pair (element {item!r}, state {state!r}): {e}"
            ) from None
        if not (isinstance(out, TupleType) and len(out) == 2 and out[1] == state):
            raise TypeError(
                f"{self!r}: the cell must return a pair (output, state {state!r}), returns {out!r}"
            )
        return TupleType(SequenceType(out[0]), state)

    def children(self) -> list[Block]:
        return [self.cell] + ([self.initial_state] if self.initial_state is not None else [])

    def _trace(self, tr: Tracer, x: Any) -> Any:
        if self.initial_state_from_input:
            xs, state = x
        else:
            xs, state = x, self.initial_state._trace(tr, None)  # type: ignore[union-attr]
        cell = self.cell
        outs = []
        for i, item in enumerate(_as_list(self, xs)):
            try:
                y, state = cell._trace(tr, (item, state))
            except InputError as e:
                e.path.insert(0, i)
                if self.initial_state_from_input:
                    e.path.insert(0, 0)
                raise
            outs.append(y)
        return outs, state

    def _repr_args(self) -> str:
        args = repr(self.cell)
        if self.initial_state_from_input:
            args += ", initial_state_from_input=True"
        elif self._initial_given:
            args += f", initial_state={self.initial_state!r}"
        return args


class Reduce(Block):
    """Balanced reduction of a non-empty sequence with a pair → item block: neighbours are
    combined level by level, so a sequence of n items takes ⌈log2 n⌉ levels, not n.

    ``default_block`` (given ``VoidType``) supplies the result for an empty sequence; without it
    an empty sequence is an input error.
    """

    def __init__(
        self, combine_block: Any, default_block: Any = None, name: str | None = None
    ) -> None:
        super().__init__(name=name)
        self.combine_block = convert_to_block(combine_block)
        self.default_block = convert_to_block(default_block) if default_block is not None else None

    def _infer(self, input_type: Type) -> Type:
        item = element_type(self, input_type, finite=True)
        try:
            out = self.combine_block.infer(TupleType(item, item))
        except TypeError as e:
            raise TypeError(
                f"{self!r}: the combine block must take a pair of {item!r}: {e}"
            ) from None
        if out != item:
            raise TypeError(f"{self!r}: the combine block returns {out!r}, elements are {item!r}")
        if self.default_block is not None:
            d = self.default_block.infer(VoidType())
            if d != item:
                raise TypeError(f"{self!r}: default block gives {d!r}, elements are {item!r}")
        return item

    def children(self) -> list[Block]:
        return [self.combine_block] + ([self.default_block] if self.default_block else [])

    def _trace(self, tr: Tracer, x: Any) -> Any:
        items = _as_list(self, x)
        if not items:
            if self.default_block is None:
                raise InputError(self, "cannot reduce an empty sequence (give a default_block)")
            return self.default_block._trace(tr, None)
        combine = self.combine_block
        while len(items) > 1:
            nxt = [
                combine._trace(tr, (items[i], items[i + 1])) for i in range(0, len(items) - 1, 2)
            ]
            if len(items) % 2:
                nxt.append(items[-1])
            items = nxt
        return items[0]

    def _repr_args(self) -> str:
        return repr(self.combine_block)
