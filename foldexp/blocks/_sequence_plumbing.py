"""Sequence plumbing: ``Broadcast``, ``Zip``, ``ZipWith``, ``NGrams``, ``Nth``, ``Length``
and ``Slice``.

None of these emits a tensor operation (``Length`` emits a constant): they rearrange Python
lists of values. A broadcast sequence is a ``Repeat`` of one value, of no length of its own;
zipping it with finite sequences repeats the value as often as they need, and mapping over it
runs the block once.
"""

from __future__ import annotations

from itertools import repeat
from typing import Any

import torch

from foldexp.blocks._base import Block, InputError, Tracer
from foldexp.blocks._sequences import Map, Repeat, as_list, element_type
from foldexp.blocks._structure import GetItem
from foldexp.types import (
    BroadcastSequenceType,
    PyObjectType,
    SequenceType,
    TensorType,
    TupleType,
    Type,
    VoidType,
    as_dtype,
)

__all__ = ["Broadcast", "Zip", "ZipWith", "NGrams", "Nth", "Length", "Slice"]


class Broadcast(Block):
    """Its input, repeated endlessly: a ``BroadcastSequenceType`` whose length is fixed by the
    finite sequences it is zipped with (``Mean() >> Broadcast()`` centres a sequence)."""

    def _infer(self, input_type: Type) -> Type:
        if isinstance(input_type, VoidType):
            raise TypeError(f"{self!r} has nothing to repeat: its input is {input_type!r}")
        return BroadcastSequenceType(input_type)

    def _trace(self, tr: Tracer, x: Any) -> Any:
        return Repeat(x)


class Zip(Block):
    """A tuple of sequences → the sequence of tuples, as long as the shortest finite one.

    Broadcast sequences repeat their value at every position; if every input is broadcast, so
    is the output.
    """

    def __init__(self, name: str | None = None) -> None:
        super().__init__(name=name)
        self._endless: tuple[bool, ...] = ()
        self._mixed = self._all_endless = False

    def _infer(self, input_type: Type) -> Type:
        if isinstance(input_type, PyObjectType):  # a Python tuple of iterables
            return SequenceType(PyObjectType())
        if not (isinstance(input_type, TupleType) and input_type.items):
            raise TypeError(f"{self!r} expects a non-empty tuple of sequences, got {input_type!r}")
        items = []
        for t in input_type.items:
            if not isinstance(t, (SequenceType, PyObjectType)):
                raise TypeError(f"{self!r} expects a tuple of sequences, got {input_type!r}")
            items.append(element_type(self, t))
        self._endless = tuple(isinstance(t, BroadcastSequenceType) for t in input_type.items)
        self._all_endless = all(self._endless)
        self._mixed = any(self._endless) and not self._all_endless
        out = TupleType(*items)
        return BroadcastSequenceType(out) if self._all_endless else SequenceType(out)

    def _trace(self, tr: Tracer, x: Any) -> Any:
        if self._all_endless:
            return Repeat(tuple([s.value for s in x]))
        if self._mixed:
            x = [repeat(s.value) if e else s for s, e in zip(x, self._endless)]
        try:
            return list(zip(*x))
        except TypeError as e:
            raise InputError(self, f"expected a tuple of sequences, got {x!r}: {e}") from None


class ZipWith(Block):
    """``Zip() >> Map(elem_block)``: applies ``elem_block`` to the tuple at each position."""

    def __init__(self, elem_block: Any, name: str | None = None) -> None:
        super().__init__(name=name)
        self._zip = Zip()
        self._map = Map(elem_block)
        self.elem_block = self._map.elem_block

    def _infer(self, input_type: Type) -> Type:
        return self._map.infer(self._zip.infer(input_type))

    def children(self) -> list[Block]:
        return [self._map]

    def _trace(self, tr: Tracer, x: Any) -> Any:
        return self._map._trace(tr, self._zip._trace(tr, x))

    def _repr_args(self) -> str:
        return repr(self.elem_block)


class NGrams(Block):
    """The sequence of ``n``-tuples of consecutive elements: ``[1, 2, 3]`` →
    ``[(1, 2), (2, 3)]`` for ``n = 2``; empty when the sequence is shorter than ``n``."""

    def __init__(self, n: int, name: str | None = None) -> None:
        if not isinstance(n, int) or n <= 0:
            raise ValueError(f"NGrams: n must be a positive integer, got {n!r}")
        super().__init__(name=name)
        self.n = n
        self._broadcast = False

    def _infer(self, input_type: Type) -> Type:
        out = TupleType(*[element_type(self, input_type)] * self.n)
        self._broadcast = isinstance(input_type, BroadcastSequenceType)
        return BroadcastSequenceType(out) if self._broadcast else SequenceType(out)

    def _trace(self, tr: Tracer, x: Any) -> Any:
        if self._broadcast:
            return Repeat((x.value,) * self.n)
        xs = as_list(self, x)
        return list(zip(*[xs[k:] for k in range(self.n)]))

    def _repr_args(self) -> str:
        return str(self.n)


class Nth(Block):
    """Element ``n`` of a sequence (negative counts from the end).

    ``Nth(n)`` takes the sequence; ``Nth()`` takes a pair ``(sequence, n)`` with ``n`` a Python
    integer from the input (TF Fold's form). An index out of range is an input error.
    """

    def __init__(self, n: int | None = None, name: str | None = None) -> None:
        super().__init__(name=name)
        self.n = n

    def _infer(self, input_type: Type) -> Type:
        seq = input_type
        if self.n is None:
            if not (
                isinstance(input_type, TupleType)
                and len(input_type) == 2
                and isinstance(input_type[1], PyObjectType)
            ):
                raise TypeError(
                    f"{self!r} expects a pair (sequence, Python integer), got {input_type!r}"
                )
            seq = input_type[0]
        if not isinstance(seq, (SequenceType, PyObjectType)):
            raise TypeError(f"{self!r} expects a sequence, got {seq!r}")
        return element_type(self, seq, finite=True)

    def _trace(self, tr: Tracer, x: Any) -> Any:
        seq, n = (x, self.n) if self.n is not None else x
        try:
            return seq[n]
        except (IndexError, TypeError, KeyError) as e:
            raise InputError(self, f"cannot take element {n!r} of {seq!r}: {e}") from None

    def _repr_args(self) -> str:
        return "" if self.n is None else repr(self.n)


class Length(Block):
    """The length of a sequence, tuple or Python object, as a scalar tensor of ``dtype``."""

    def __init__(self, dtype: str | torch.dtype = "float32", name: str | None = None) -> None:
        self.dtype = as_dtype(dtype)
        super().__init__(output_type=TensorType((), self.dtype), name=name)

    def _infer(self, input_type: Type) -> Type:
        if isinstance(input_type, BroadcastSequenceType) or not isinstance(
            input_type, (SequenceType, TupleType, PyObjectType)
        ):
            raise TypeError(
                f"{self!r} expects a finite sequence, a tuple or a Python object, "
                f"got {input_type!r}"
            )
        return self._output_type  # type: ignore[return-value]

    def _trace(self, tr: Tracer, x: Any) -> Any:
        try:
            n = len(x)
        except TypeError:
            raise InputError(self, f"{x!r} has no length") from None
        return tr.constant(self._output_type, n)  # type: ignore[arg-type]

    def _repr_args(self) -> str:
        dt = str(self.dtype).replace("torch.", "")
        return "" if dt == "float32" else f"'{dt}'"


class Slice(GetItem):
    """``x[start:stop:step]`` of a sequence, tuple or Python object (``step=-1`` reverses).

    Positional arguments are ``start, stop, step`` in that order (unlike Python's ``slice(n)``,
    ``Slice(n)`` drops the first ``n`` elements); keywords read best.
    """

    def __init__(
        self,
        start: int | None = None,
        stop: int | None = None,
        step: int | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(slice(start, stop, step), name=name)

    def _repr_args(self) -> str:
        k = self.key
        parts = [f"{n}={v!r}" for n, v in (("start", k.start), ("stop", k.stop), ("step", k.step))]
        return ", ".join(p for p, v in zip(parts, (k.start, k.stop, k.step)) if v is not None)
