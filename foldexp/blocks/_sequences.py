"""Blocks over sequences: ``Map``, ``Fold`` (a left fold, as an RNN unrolls) and ``Reduce``
(a balanced binary reduction, depth ⌈log2 n⌉)."""

from __future__ import annotations

from typing import Any

from foldexp.blocks._base import (
    Block,
    InputError,
    Tracer,
    convert_to_block,
    sequence_item_type,
)
from foldexp.types import SequenceType, TupleType, Type, VoidType

__all__ = ["Map", "Fold", "Reduce"]


def _as_list(block: Block, x: Any) -> list[Any]:
    if isinstance(x, list):
        return x
    try:
        return list(x)
    except TypeError:
        raise InputError(block, f"expected a sequence, got {x!r} ({type(x).__name__})") from None


class Map(Block):
    """Applies ``elem_block`` to every element of a sequence; outputs the sequence of results."""

    def __init__(self, elem_block: Any, name: str | None = None) -> None:
        super().__init__(name=name)
        self.elem_block = convert_to_block(elem_block)

    def _infer(self, input_type: Type) -> Type:
        item = sequence_item_type(self, input_type)
        return SequenceType(self.elem_block.infer(item))

    def children(self) -> list[Block]:
        return [self.elem_block]

    def _trace(self, tr: Tracer, x: Any) -> Any:
        b = self.elem_block
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
        item = sequence_item_type(self, input_type)
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
        item = sequence_item_type(self, input_type)
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
