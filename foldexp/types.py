"""The type system of blocks: what flows along every edge of a block graph.

A block maps a value of its input type to a value of its output type. The types follow the Fold
paper (§3.1) and TF Fold's ``td`` module:

- ``TensorType(shape, dtype)`` — a tensor; ``shape`` excludes the batch dimension, which the
  engine adds when it batches values together.
- ``TupleType(*items)`` — a fixed-length tuple of values of (possibly) different types.
- ``SequenceType(item)`` — a variable-length list of values of one type.
- ``BroadcastSequenceType(item)`` — an endless repetition of one value, whose length is fixed
  lazily by whatever consumes it (``Broadcast``, zipped with a real sequence).
- ``PyObjectType()`` — an arbitrary Python object (the paper's *Input*); never a tensor.
- ``VoidType()`` — no value.

Types are immutable and hashable; equality is structural. ``Unknown`` stands for a type that has
not been inferred yet.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

__all__ = [
    "Type",
    "TensorType",
    "TupleType",
    "SequenceType",
    "BroadcastSequenceType",
    "PyObjectType",
    "VoidType",
    "as_dtype",
    "is_tensor_tree",
    "flatten_tensor_types",
]

_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float": torch.float32,
    "float64": torch.float64,
    "double": torch.float64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int64": torch.int64,
    "long": torch.int64,
    "int32": torch.int32,
    "int": torch.int64,
    "int16": torch.int16,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "bool": torch.bool,
}


def as_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """Converts a dtype name (``'float32'``, ``'int64'``, ...) or a ``torch.dtype`` to a dtype."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if isinstance(dtype, str) and dtype in _DTYPES:
        return _DTYPES[dtype]
    raise TypeError(f"unknown dtype {dtype!r}; expected a torch.dtype or one of {sorted(_DTYPES)}")


class Type:
    """Base of all block types. Instances are immutable and compared structurally."""

    __slots__ = ()

    def _key(self) -> tuple:
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self._key() == other._key()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._key()))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __reduce__(self) -> tuple:
        # Slots plus a blocked __setattr__ defeat the default pickling; rebuild from arguments.
        return (type(self), self._args())

    def _args(self) -> tuple:
        return ()


class TensorType(Type):
    """A tensor of fixed ``shape`` (batch dimension excluded) and ``dtype``."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape: tuple[int, ...] | list[int] | int = (), dtype="float32") -> None:
        if isinstance(shape, int):
            shape = (shape,)
        shape = tuple(shape)
        if not all(isinstance(d, int) and d >= 0 for d in shape):
            raise TypeError(f"TensorType shape must be non-negative ints, got {shape!r}")
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", as_dtype(dtype))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def _key(self) -> tuple:
        return (self.shape, self.dtype)

    def _args(self) -> tuple:
        return (self.shape, self.dtype)

    def __repr__(self) -> str:
        return f"TensorType({self.shape!r}, '{str(self.dtype).replace('torch.', '')}')"


class TupleType(Type):
    """A fixed-length tuple; ``TupleType(a, b)`` or ``TupleType([a, b])``."""

    __slots__ = ("items",)

    def __init__(self, *items: Type) -> None:
        if len(items) == 1 and isinstance(items[0], (list, tuple)):
            items = tuple(items[0])
        for t in items:
            if not isinstance(t, Type):
                raise TypeError(f"TupleType items must be types, got {t!r}")
        object.__setattr__(self, "items", tuple(items))

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> Type:
        return self.items[i]

    def __iter__(self) -> Iterator[Type]:
        return iter(self.items)

    def _key(self) -> tuple:
        return self.items

    def _args(self) -> tuple:
        return self.items

    def __repr__(self) -> str:
        return f"TupleType({', '.join(map(repr, self.items))})"


class SequenceType(Type):
    """A variable-length sequence whose elements all have type ``item_type``."""

    __slots__ = ("item_type",)

    def __init__(self, item_type: Type) -> None:
        if not isinstance(item_type, Type):
            raise TypeError(f"SequenceType item must be a type, got {item_type!r}")
        object.__setattr__(self, "item_type", item_type)

    def _key(self) -> tuple:
        return (self.item_type,)

    def _args(self) -> tuple:
        return (self.item_type,)

    def __repr__(self) -> str:
        return f"SequenceType({self.item_type!r})"


class BroadcastSequenceType(SequenceType):
    """An endless sequence repeating one value; its length comes from the sequence it meets."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"BroadcastSequenceType({self.item_type!r})"


class PyObjectType(Type):
    """Any Python object: the input of a block graph (the paper's *Input* type)."""

    __slots__ = ()

    def _key(self) -> tuple:
        return ()

    def __repr__(self) -> str:
        return "PyObjectType()"


class VoidType(Type):
    """No value at all."""

    __slots__ = ()

    def _key(self) -> tuple:
        return ()

    def __repr__(self) -> str:
        return "VoidType()"


def is_tensor_tree(t: Type) -> bool:
    """True for a tensor type or a (nested) tuple of tensor types — what a ``Function`` takes."""
    if isinstance(t, TensorType):
        return True
    return isinstance(t, TupleType) and all(is_tensor_tree(i) for i in t.items)


def flatten_tensor_types(t: Type) -> list[TensorType]:
    """The tensor types of a (nested) tuple of tensor types, left to right."""
    if isinstance(t, TensorType):
        return [t]
    if isinstance(t, TupleType):
        out: list[TensorType] = []
        for item in t.items:
            out.extend(flatten_tensor_types(item))
        return out
    raise TypeError(f"expected a tensor type or a tuple of tensor types, got {t!r}")
