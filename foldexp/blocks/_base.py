"""The block: a typed function from input to output, and the two ways of running one.

A block's life (as in TF Fold): construct → infer and check types → trace. Tracing walks the
block over one Python input and emits *tensor operations* into a ``Tracer``; structural blocks
(records, sequences, control flow) only shuffle Python containers of values. Two tracers exist:
the compiler's, which records a graph to batch (``foldexp.compiler``), and the eager one in
``_eager.py``, which runs each operation at once on a batch of one — the oracle every batched
result is checked against.

Values while tracing: a tensor value is whatever the tracer hands out (an int id in the compiler,
a tensor of batch size one eagerly); a tuple value is a Python tuple; a sequence value is a Python
list; a Python-object value is the object itself; void is ``None``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from foldexp.types import (
    PyObjectType,
    TensorType,
    TupleType,
    Type,
)

if TYPE_CHECKING:
    from foldexp.blocks._ops import Op

__all__ = [
    "Block",
    "Tracer",
    "InputError",
    "Pipe",
    "convert_to_block",
    "iter_blocks",
    "Pending",
    "Wire",
]


class Tracer(Protocol):
    """What a block may ask of the engine while it walks one input."""

    def constant(self, ttype: TensorType, payload: Any) -> Any:
        """A tensor value holding ``payload`` (a number, nested list, array or tensor)."""

    def zeros(self, ttype: TensorType) -> Any:
        """A tensor value of zeros."""

    def apply(self, op: Op, args: list[Any]) -> list[Any]:
        """Invokes ``op`` on flat tensor values; returns its flat outputs."""

    def metric(self, name: str, value: Any) -> None:
        """Records ``value`` under the metric ``name`` for the current input."""


class InputError(ValueError):
    """A Python input that a block cannot take; ``path`` locates it inside the whole input."""

    def __init__(self, block: Block | None, message: str) -> None:
        super().__init__(message)
        self.block = block
        self.message = message
        self.path: list[Any] = []

    def __str__(self) -> str:
        where = "".join(f"[{p!r}]" for p in self.path) or "(the input itself)"
        who = f" in {self.block!r}" if self.block is not None else ""
        return f"at input{where}{who}: {self.message}"


class Pending(Exception):
    """Raised during type inference when a recursive ``ForwardDeclaration`` has no type yet."""

    def __init__(self, decl: Any) -> None:
        super().__init__(f"type of {decl!r} is not known yet")
        self.decl = decl


# How many recursive cases type inference has skipped and not yet checked (``OneOf`` skips a
# case whose type is ``Pending`` and goes on with the type of its other cases). A block whose
# inference saw the count change got a provisional type, computed before the recursion's type
# was known: it is not fixed, so that the ``ForwardDeclaration``'s second pass re-infers it. That
# pass checks the skipped cases and takes them off the count (``settle_skipped_cases``).
_skipped = [0]


def note_skipped_case(pending: Pending) -> None:
    """Records that a recursive case was skipped for now (called by ``OneOf``)."""
    _skipped[0] += 1
    pending.decl._skipped += 1


def skipped_cases() -> int:
    """How many skipped recursive cases are not yet checked."""
    return _skipped[0]


def settle_skipped_cases(n: int) -> None:
    """Takes ``n`` skipped cases, now checked, off the count (called by ``ForwardDeclaration``)."""
    _skipped[0] -= n


class Wire:
    """One output of a block inside a ``Composition``: ``block[i]``, item ``i`` of its output."""

    __slots__ = ("block", "index")

    def __init__(self, block: Block, index: Any) -> None:
        self.block = block
        self.index = index

    def __repr__(self) -> str:
        return f"{self.block!r}[{self.index!r}]"


def _compatible(expected: Type, actual: Type) -> bool:
    """Whether a value of type ``actual`` may flow into an input declared ``expected``."""
    if expected == actual:
        return True
    if isinstance(expected, PyObjectType):
        # Python objects can hold anything that is not a tensor-valued structure.
        return isinstance(actual, PyObjectType)
    return False


class Block:
    """Base of all blocks. Subclasses implement ``_infer``, ``_trace`` and ``children``.

    Types are inferred once, when the block is first given an input type (by ``>>``, by a
    parent, by ``Compiler`` or ``eval``); after that they are fixed.
    """

    _input_type: Type | None
    _output_type: Type | None

    def __init__(
        self,
        input_type: Type | None = None,
        output_type: Type | None = None,
        name: str | None = None,
    ) -> None:
        self._input_type = input_type
        self._output_type = output_type
        self._declared_input = input_type  # what the user (or the block's nature) fixed up front
        self._inferred = False
        self.name = name

    # ---- types ---------------------------------------------------------------------------
    @property
    def input_type(self) -> Type | None:
        """The input type, or ``None`` if not known yet."""
        return self._input_type

    @property
    def output_type(self) -> Type | None:
        """The output type, or ``None`` if not inferred yet."""
        return self._output_type

    def infer(self, input_type: Type) -> Type:
        """Fixes the input type and returns the output type, checking everything inside.

        Raises:
            TypeError: naming this block, the expected and the actual type, when they differ.
        """
        if self._inferred:
            if not _compatible(self._input_type, input_type):
                raise TypeError(
                    f"{self!r} expects input type {self._input_type!r} but is given {input_type!r}"
                )
            return self._output_type
        if self._declared_input is not None and not _compatible(self._declared_input, input_type):
            raise TypeError(
                f"{self!r} expects input type {self._declared_input!r} but is given {input_type!r}"
            )
        mark = _skipped[0]
        out = self._infer(input_type)
        if self._output_type is not None and self._output_type != out:
            raise TypeError(
                f"{self!r} declares output type {self._output_type!r}, computes {out!r}"
            )
        if _skipped[0] != mark:
            return out  # provisional: a recursive case inside was skipped (see ``_skipped``)
        self._input_type = input_type
        self._output_type = out
        self._inferred = True
        return out

    def _infer(self, input_type: Type) -> Type:
        raise NotImplementedError

    def children(self) -> list[Block]:
        """The blocks this block calls (for walking the graph)."""
        return []

    # ---- tracing --------------------------------------------------------------------------
    def _trace(self, tr: Tracer, x: Any) -> Any:
        raise NotImplementedError

    def eval(self, x: Any, input_type: Type | None = None, device: Any = None) -> Any:
        """Runs this block on one input, eagerly, without batching (for debugging and tests).

        Returns tensors without a batch dimension, tuples, lists, or Python objects. Constants
        are made on ``device``; by default where the block's parameters are.
        """
        from foldexp.blocks._eager import eval_block

        return eval_block(self, x, input_type, device)

    def max_depth(self, x: Any, input_type: Type | None = None) -> int:
        """The depth of the deepest operation this block performs on input ``x``."""
        from foldexp.blocks._eager import depth_of

        return depth_of(self, x, input_type)

    # ---- composition ----------------------------------------------------------------------
    def __rshift__(self, other: Any) -> Pipe:
        return Pipe(self, other)

    def __rrshift__(self, other: Any) -> Pipe:
        return Pipe(other, self)

    def reads(self, *sources: Any) -> Block:
        """Inside ``with composition.scope():``, wires ``sources`` into this block's input.

        One source gives its value as it is; several give a tuple; none gives no input (void).
        A source is a block, a ``block[i]`` wire, or ``composition.input`` (or ``input[i]``).

        Returns:
            ``self``, so that ``y = Block().reads(x)`` names the new node.

        Raises:
            RuntimeError: outside a composition scope.
            ValueError: if the wiring makes a cycle, or this block's input is already wired.
        """
        from foldexp.blocks._composition import current_composition

        current_composition(self).connect(sources, self)
        return self

    def __getitem__(self, index: Any) -> Wire:
        """``block[i]``: item ``i`` of this block's (tuple) output, for ``reads``."""
        return Wire(self, index)

    # ``__getitem__`` would otherwise make every block look iterable (and loop forever).
    __iter__ = None

    def _repr_args(self) -> str:
        return ""

    def __repr__(self) -> str:
        name = f", name={self.name!r}" if self.name else ""
        args = self._repr_args()
        if name and not args:
            name = name[2:]
        return f"{type(self).__name__}({args}{name})"


class Pipe(Block):
    """``a >> b >> c``: feeds each block's output to the next."""

    def __init__(self, *blocks: Any, name: str | None = None) -> None:
        flat: list[Block] = []
        for b in blocks:
            b = convert_to_block(b)
            flat.extend(b.blocks if isinstance(b, Pipe) and b.name is None else [b])
        if not flat:
            raise TypeError("Pipe needs at least one block")
        super().__init__(name=name)
        self.blocks = flat
        # Check what can be checked now: adjacent blocks whose types are already fixed.
        for left, right in zip(flat, flat[1:]):
            lo, ri = left.output_type, right._declared_input or right.input_type
            if lo is not None and ri is not None and not _compatible(ri, lo):
                raise TypeError(
                    f"cannot compose {left!r} >> {right!r}: {left!r} outputs {lo!r} but "
                    f"{right!r} expects {ri!r}"
                )
        self._declared_input = flat[0]._declared_input

    def _infer(self, input_type: Type) -> Type:
        t = input_type
        for left, right in zip([None, *self.blocks], self.blocks):
            try:
                t = right.infer(t)
            except TypeError as e:
                if left is None or str(e).startswith("cannot compose"):
                    raise
                raise TypeError(f"cannot compose {left!r} >> {right!r}: {e}") from None
        return t

    def children(self) -> list[Block]:
        return list(self.blocks)

    def _trace(self, tr: Tracer, x: Any) -> Any:
        for b in self.blocks:
            x = b._trace(tr, x)
        return x

    def __repr__(self) -> str:
        return " >> ".join(repr(b) for b in self.blocks)


def iter_blocks(
    root: Block, more: Callable[[Block], Sequence[Block]] | None = None
) -> Iterator[Block]:
    """Every block reachable from ``root`` once, depth-first in ``children()`` order (a
    recursive model's cycles walked once); ``more(block)``: blocks to visit after a block's
    own children."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        b = stack.pop()
        if id(b) in seen:
            continue
        seen.add(id(b))
        yield b
        children = b.children()
        if more is not None:
            children = [*children, *more(b)]
        stack.extend(reversed(children))


def convert_to_block(obj: Any) -> Block:
    """Turns what a user may write into a block.

    A block stays as it is; a dict becomes a ``Record``; a tuple or list becomes a ``Record`` with
    integer keys (TF Fold's convention); an ``nn.Module`` or other callable becomes a ``Function``.
    """
    if isinstance(obj, Block):
        return obj
    from foldexp.blocks._structure import Record
    from foldexp.blocks._tensors import Function

    if isinstance(obj, (dict, list, tuple)):
        return Record(obj)
    if callable(obj):
        return Function(obj)
    raise TypeError(f"cannot convert {obj!r} (a {type(obj).__name__}) to a block")


def tuple_item_types(block: Block, t: Type) -> tuple[Type, ...]:
    if not isinstance(t, TupleType):
        raise TypeError(f"{block!r} expects a tuple as input, got {t!r}")
    return t.items
