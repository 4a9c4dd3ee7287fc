"""Recursion: ``ForwardDeclaration`` and the reference blocks it hands out.

A tree or graph model refers to itself before it is defined: ``decl = ForwardDeclaration()``,
``decl()`` is a block usable at once, ``decl.resolve_to(block)`` says what it means. Type
inference runs in two passes when the definition is recursive (``OneOf`` skips the cases still
pending on the first, see ``_base.note_skipped_case``); tracing follows the resolved block.
"""

from __future__ import annotations

from typing import Any

from foldexp.blocks._base import (
    Block,
    Pending,
    Tracer,
    convert_to_block,
    settle_skipped_cases,
    skipped_cases,
)
from foldexp.types import Type

__all__ = ["ForwardDeclaration"]


class ForwardDeclaration:
    """A placeholder for a block defined later, for recursion (trees, graphs).

    ``decl()`` makes a reference block usable now; ``decl.resolve_to(block)`` fixes what every
    reference means, exactly once. The types are optional: without them they are inferred from
    the non-recursive cases of the definition (e.g. the leaf case of a tree).
    """

    def __init__(
        self,
        input_type: Type | None = None,
        output_type: Type | None = None,
        name: str | None = None,
    ) -> None:
        self.input_type = input_type
        self.output_type = output_type
        self.name = name
        self.block: Block | None = None
        self._inferring = False
        self._skipped = 0  # counted by ``OneOf`` when it skips a case that uses this declaration

    def __call__(self) -> _ForwardRef:
        return _ForwardRef(self)

    def resolve_to(self, block: Any) -> None:
        """Defines the declaration. Raises ``ValueError`` if it was already resolved."""
        if self.block is not None:
            raise ValueError(f"{self!r} is already resolved to {self.block!r}")
        self.block = convert_to_block(block)

    def _infer(self, input_type: Type) -> Type:
        if self.block is None:
            raise TypeError(f"{self!r} is used but was never resolved (call resolve_to)")
        if self.input_type is not None and self.input_type != input_type:
            raise TypeError(f"{self!r} expects input {self.input_type!r}, given {input_type!r}")
        if self.output_type is not None and (self.block._inferred or self._inferring):
            return self.output_type
        if self._inferring:
            raise Pending(self)
        self._inferring = True
        self._skipped = 0
        declared, mark = self.output_type, skipped_cases()
        try:
            try:
                out = self.block.infer(input_type)
            except Pending as p:
                if p.decl is not self:
                    raise
                raise TypeError(
                    f"{self!r}: its type cannot be inferred, every case of its definition "
                    "refers back to it; give it a non-recursive case or declare output_type"
                ) from None
            if self._skipped:
                # First pass: the recursive cases were skipped and ``out`` comes from the others.
                # Second pass: with that type known, every case is inferred and checked.
                skipped = self._skipped
                self.output_type = out
                out = self.block.infer(input_type)
                settle_skipped_cases(skipped)
        except Exception:
            # Nothing inferred here is kept: forget the provisional type and the skipped cases.
            self.output_type = declared
            settle_skipped_cases(skipped_cases() - mark)
            raise
        finally:
            self._inferring = False
        if self.output_type is not None and out != self.output_type:
            raise TypeError(
                f"{self!r} declares output {self.output_type!r}, its block gives {out!r}"
            )
        self.input_type, self.output_type = input_type, out
        return out

    def __repr__(self) -> str:
        return f"ForwardDeclaration({self.name!r})" if self.name else "ForwardDeclaration()"


class _ForwardRef(Block):
    """A use of a ``ForwardDeclaration``."""

    def __init__(self, decl: ForwardDeclaration) -> None:
        super().__init__(name=None)
        self.decl = decl

    def _infer(self, input_type: Type) -> Type:
        return self.decl._infer(input_type)

    def children(self) -> list[Block]:
        return [self.decl.block] if self.decl.block is not None else []

    def _trace(self, tr: Tracer, x: Any) -> Any:
        return self.decl.block._trace(tr, x)  # type: ignore[union-attr]

    def __repr__(self) -> str:
        return f"{self.decl!r}()"
