"""Structural blocks: Python-side plumbing that emits no tensor operation of its own.

``Identity``, ``InputTransform``, ``GetItem``, ``Record``, ``AllOf``, ``OneOf``, ``Optional``
and ``Void`` (recursion, ``ForwardDeclaration``, is in ``_recursion.py``). They route values; the
operations they lead to are emitted by the tensor blocks inside them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from foldexp.blocks._base import (
    Block,
    InputError,
    Pending,
    Tracer,
    Wire,
    convert_to_block,
    note_skipped_case,
)
from foldexp.types import (
    BroadcastSequenceType,
    PyObjectType,
    SequenceType,
    TupleType,
    Type,
    VoidType,
)

__all__ = [
    "Identity",
    "InputTransform",
    "GetItem",
    "Record",
    "AllOf",
    "OneOf",
    "Optional",
    "Void",
]


class Identity(Block):
    """Passes its input through unchanged."""

    def _infer(self, input_type: Type) -> Type:
        return input_type

    def _trace(self, tr: Tracer, x: Any) -> Any:
        return x


class Void(Block):
    """Discards its input; outputs nothing."""

    def _infer(self, input_type: Type) -> Type:
        return VoidType()

    def _trace(self, tr: Tracer, x: Any) -> Any:
        return None


class InputTransform(Block):
    """Applies a plain Python function to a Python-object input (e.g. a word → its index)."""

    def __init__(self, py_fn: Callable[[Any], Any], name: str | None = None) -> None:
        if not callable(py_fn):
            raise TypeError(f"InputTransform needs a callable, got {py_fn!r}")
        super().__init__(PyObjectType(), PyObjectType(), name)
        self.py_fn = py_fn

    def _infer(self, input_type: Type) -> Type:
        return PyObjectType()

    def _trace(self, tr: Tracer, x: Any) -> Any:
        try:
            return self.py_fn(x)
        except RecursionError:
            raise  # too deep for the closures, not a bad input: the compiler traces it again
        except Exception as e:
            raise InputError(self, f"{type(e).__name__}: {e}") from e

    def _repr_args(self) -> str:
        return getattr(self.py_fn, "__qualname__", repr(self.py_fn))


class GetItem(Block):
    """``x[key]``: an item (or, with a ``slice`` key, a slice) of a tuple, a sequence or a
    Python object."""

    def __init__(self, key: Any, name: str | None = None) -> None:
        super().__init__(name=name)
        self.key = key

    def _infer(self, input_type: Type) -> Type:
        if isinstance(input_type, BroadcastSequenceType):
            raise TypeError(
                f"{self!r} cannot index an endless broadcast sequence {input_type!r}; "
                "zip it with a finite sequence first"
            )
        if isinstance(input_type, TupleType):
            try:
                item = input_type.items[self.key]
            except (IndexError, TypeError):
                raise TypeError(f"{self!r}: no item {self.key!r} in {input_type!r}") from None
            return TupleType(*item) if isinstance(self.key, slice) else item
        if isinstance(input_type, SequenceType):
            return input_type if isinstance(self.key, slice) else input_type.item_type
        if isinstance(input_type, PyObjectType):
            return input_type
        raise TypeError(f"{self!r} expects a tuple, sequence or Python object, got {input_type!r}")

    def _trace(self, tr: Tracer, x: Any) -> Any:
        try:
            return x[self.key]
        except (IndexError, KeyError, TypeError) as e:
            raise InputError(self, f"cannot take item {self.key!r} of {x!r}: {e}") from e

    def _repr_args(self) -> str:
        return repr(self.key)


def _pairs(fields: Any) -> list[tuple[Any, Block]]:
    if isinstance(fields, Mapping):
        items = list(fields.items())
    elif (
        isinstance(fields, (list, tuple))
        and all(
            isinstance(f, tuple) and len(f) == 2 and not isinstance(f[1], tuple) for f in fields
        )
        and fields
        and not any(isinstance(f, Block) for f in fields)
    ):
        items = list(fields)
    else:
        items = list(enumerate(fields))
    return [(k, convert_to_block(b)) for k, b in items]


class Record(Block):
    """A dict (or ordered ``(key, block)`` pairs) of blocks: field ``k`` of the input goes to
    block ``k``; the output is the tuple of their outputs, in field order.

    A plain tuple or list of blocks makes a record over integer keys ``0, 1, …``.
    """

    def __init__(self, fields: Any, name: str | None = None) -> None:
        super().__init__(name=name)
        self.fields = _pairs(fields)
        self.keys = [k for k, _ in self.fields]

    def _infer(self, input_type: Type) -> Type:
        outs = []
        for k, b in self.fields:
            if isinstance(input_type, TupleType):
                if not isinstance(k, int) or not 0 <= k < len(input_type):
                    raise TypeError(f"{self!r}: field {k!r} is not an index of {input_type!r}")
                item = input_type.items[k]
            elif isinstance(input_type, PyObjectType):
                item = PyObjectType()
            else:
                raise TypeError(
                    f"{self!r} expects a Python dict/tuple or a tuple type, got {input_type!r}"
                )
            outs.append(b.infer(item))
        return TupleType(*outs)

    def children(self) -> list[Block]:
        return [b for _, b in self.fields]

    def _trace(self, tr: Tracer, x: Any) -> Any:
        out = []
        for k, b in self.fields:
            try:
                item = x[k]
            except (KeyError, IndexError, TypeError) as e:
                raise InputError(self, f"input has no field {k!r}: {e}") from e
            try:
                out.append(b._trace(tr, item))
            except InputError as e:
                e.path.insert(0, k)
                raise
        return tuple(out)

    def _repr_args(self) -> str:
        return "{" + ", ".join(f"{k!r}: {b!r}" for k, b in self.fields) + "}"

    def __getitem__(self, key: Any) -> Wire:
        """``record[key]``: the output of the field ``key``, for ``reads`` in a composition."""
        return Wire(self, self.keys.index(key) if key in self.keys else key)


class AllOf(Block):
    """Runs every block on the same input; outputs the tuple of their outputs."""

    def __init__(self, *blocks: Any, name: str | None = None) -> None:
        super().__init__(name=name)
        self.blocks = [convert_to_block(b) for b in blocks]

    def _infer(self, input_type: Type) -> Type:
        return TupleType(*[b.infer(input_type) for b in self.blocks])

    def children(self) -> list[Block]:
        return list(self.blocks)

    def _trace(self, tr: Tracer, x: Any) -> Any:
        return tuple([b._trace(tr, x) for b in self.blocks])

    def _repr_args(self) -> str:
        return ", ".join(map(repr, self.blocks))


class OneOf(Block):
    """Dispatches on ``key_fn(input)`` to one of ``case_blocks`` (a dict or ``(key, block)``
    pairs, or a list indexed by position). Cases may differ in structure but must agree on the
    output type. With ``pre_block``, the chosen case receives ``pre_block``'s output instead of
    the raw input.
    """

    def __init__(
        self,
        key_fn: Callable[[Any], Any],
        case_blocks: Any,
        pre_block: Any = None,
        name: str | None = None,
    ) -> None:
        super().__init__(name=name)
        if isinstance(case_blocks, Mapping):
            pairs = list(case_blocks.items())
        elif all(isinstance(c, tuple) and len(c) == 2 for c in case_blocks):
            pairs = list(case_blocks)
        else:
            pairs = list(enumerate(case_blocks))
        if not pairs:
            raise TypeError("OneOf needs at least one case")
        self.key_fn = key_fn
        self.cases: dict[Any, Block] = {k: convert_to_block(b) for k, b in pairs}
        self.pre_block = convert_to_block(pre_block) if pre_block is not None else None

    def _infer(self, input_type: Type) -> Type:
        case_input = self.pre_block.infer(input_type) if self.pre_block else input_type
        out: Type | None = None
        pending: list[Pending] = []
        for key, b in self.cases.items():
            try:
                t = b.infer(case_input)
            except Pending as p:  # a recursive case: its type comes from the others
                pending.append(p)
                continue
            if out is not None and t != out:
                raise TypeError(
                    f"{self!r}: case {key!r} outputs {t!r} but an earlier case outputs {out!r}; "
                    "all cases must agree on the output type"
                )
            out = t
        if out is None:
            raise pending[0]
        for p in pending:
            # Go on with the other cases' type; the declaration's second pass checks this case.
            note_skipped_case(p)
        return out

    def children(self) -> list[Block]:
        return ([self.pre_block] if self.pre_block else []) + list(self.cases.values())

    def _trace(self, tr: Tracer, x: Any) -> Any:
        try:
            key = self.key_fn(x)
        except RecursionError:
            raise  # too deep for the closures, not a bad input: the compiler traces it again
        except Exception as e:
            raise InputError(self, f"key_fn failed: {type(e).__name__}: {e}") from e
        block = self.cases.get(key)
        if block is None:
            raise InputError(self, f"key {key!r} matches no case; cases are {list(self.cases)}")
        if self.pre_block is not None:
            x = self.pre_block._trace(tr, x)
        return block._trace(tr, x)

    def _repr_args(self) -> str:
        fn = getattr(self.key_fn, "__name__", repr(self.key_fn))
        return f"{fn}, {{" + ", ".join(f"{k!r}: {b!r}" for k, b in self.cases.items()) + "}"


class Optional(Block):
    """``some_case`` on an input that is not ``None``; ``none_case`` (default: zeros of
    ``some_case``'s output type) on ``None``."""

    def __init__(self, some_case: Any, none_case: Any = None, name: str | None = None) -> None:
        super().__init__(name=name)
        self.some_case = convert_to_block(some_case)
        self.none_case = convert_to_block(none_case) if none_case is not None else None

    def _infer(self, input_type: Type) -> Type:
        out = self.some_case.infer(input_type)
        if self.none_case is None:
            from foldexp.blocks._tensors import Zeros

            self.none_case = Zeros(out)
        none_out = self.none_case.infer(VoidType())
        if none_out != out:
            raise TypeError(f"{self!r}: none case outputs {none_out!r}, some case {out!r}")
        return out

    def children(self) -> list[Block]:
        return [self.some_case] + ([self.none_case] if self.none_case else [])

    def _trace(self, tr: Tracer, x: Any) -> Any:
        if x is None:
            return self.none_case._trace(tr, None)  # type: ignore[union-attr]
        return self.some_case._trace(tr, x)

    def _repr_args(self) -> str:
        return repr(self.some_case)
