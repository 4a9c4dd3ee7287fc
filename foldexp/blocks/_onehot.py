"""One-hot encodings of Python values: ``OneHot`` (a range of integers) and ``OneHotFromList``
(any hashable values). Each row of the identity matrix is built once; an input becomes one
constant, so one-hot inputs cost no operation at all."""

from __future__ import annotations

import operator
from collections.abc import Iterable
from typing import Any

import torch

from foldexp.blocks._base import Block, InputError, Tracer
from foldexp.types import PyObjectType, TensorType, Type, as_dtype

__all__ = ["OneHot", "OneHotFromList"]


def _rows(n: int, dtype: torch.dtype) -> list[torch.Tensor]:
    return list(torch.eye(n, dtype=dtype).unbind(0))


class OneHot(Block):
    """An integer in ``[start, stop)`` → its one-hot vector of ``stop - start``.

    ``OneHot(n)`` covers ``[0, n)``, like ``range``. An integer outside the range is an input
    error.
    """

    def __init__(
        self,
        start: int,
        stop: int | None = None,
        dtype: str | torch.dtype = "float32",
        name: str | None = None,
    ) -> None:
        if stop is None:
            start, stop = 0, start
        if stop - start <= 0:
            raise ValueError(f"OneHot: the range [{start}, {stop}) is empty")
        self.start, self.stop, self.dtype = start, stop, as_dtype(dtype)
        super().__init__(PyObjectType(), TensorType((stop - start,), self.dtype), name)
        self._table = _rows(stop - start, self.dtype)

    def _infer(self, input_type: Type) -> Type:
        return self._output_type  # type: ignore[return-value]

    def _trace(self, tr: Tracer, x: Any) -> Any:
        try:
            i = operator.index(x) - self.start
        except TypeError:
            raise InputError(self, f"expected an integer, got {x!r}") from None
        if not 0 <= i < len(self._table):
            raise InputError(self, f"{x!r} is outside [{self.start}, {self.stop})")
        return tr.constant(self._output_type, self._table[i])  # type: ignore[arg-type]

    def _repr_args(self) -> str:
        dt = str(self.dtype).replace("torch.", "")
        dtype = "" if dt == "float32" else f", dtype='{dt}'"
        return (f"{self.stop}" if self.start == 0 else f"{self.start}, {self.stop}") + dtype


class OneHotFromList(Block):
    """A value from ``elements`` → the one-hot vector of its position in the list.

    With ``strict=False`` any other value gives zeros; otherwise it is an input error.
    """

    def __init__(
        self,
        elements: Iterable[Any],
        dtype: str | torch.dtype = "float32",
        strict: bool = True,
        name: str | None = None,
    ) -> None:
        self.elements = list(elements)
        self.index = {e: i for i, e in enumerate(self.elements)}
        if len(self.index) != len(self.elements) or not self.elements:
            raise ValueError(f"OneHotFromList needs distinct elements, got {self.elements!r}")
        self.dtype, self.strict = as_dtype(dtype), strict
        super().__init__(PyObjectType(), TensorType((len(self.elements),), self.dtype), name)
        self._table = _rows(len(self.elements), self.dtype)

    def _infer(self, input_type: Type) -> Type:
        return self._output_type  # type: ignore[return-value]

    def _trace(self, tr: Tracer, x: Any) -> Any:
        try:
            i = self.index.get(x)
        except TypeError:  # unhashable
            i = None
        if i is None:
            if self.strict:
                raise InputError(self, f"{x!r} is not one of {self.elements!r}")
            return tr.zeros(self._output_type)  # type: ignore[arg-type]
        return tr.constant(self._output_type, self._table[i])  # type: ignore[arg-type]

    def _repr_args(self) -> str:
        return repr(self.elements) + ("" if self.strict else ", strict=False")
