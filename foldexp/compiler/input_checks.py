"""Batch-wide input checks while scheduling: values no plan can take, found with numpy.

An integer constant outside its dtype, or an id outside the table an operation looks it up in,
would make torch fail deep inside a batched call (or wrap around silently). The scheduler checks
a whole batch at once with one numpy min/max per type and per table and raises ``InvalidInput``;
``Compiler.build`` then traces the batch again through the blocks' own checks to name the input.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from foldexp.blocks.internal import Op
from foldexp.compiler.native_trace import exact_int64
from foldexp.types import TensorType

__all__ = ["InvalidInput", "check_ids", "check_range", "scalar_array"]


class InvalidInput(ValueError):
    """A batch holds a value no plan can take: an integer outside its dtype, an id outside the
    table it looks up. Found batch-wide, with numpy; ``Compiler.build`` then traces the batch
    again through the blocks' own checks to name the input and the path (an ``InputError``)."""


def scalar_array(payloads: list[Any]) -> np.ndarray | None:
    """Scalar constants as one numpy array (``None`` if numpy cannot make one)."""
    ints = exact_int64(payloads)  # ids read from the inputs, typically
    if ints is not None:
        return ints
    try:
        return np.asarray(payloads)
    except (TypeError, ValueError, RuntimeError):  # e.g. tensors on a GPU
        return None


def check_range(
    t: TensorType, values: np.ndarray, payloads: list[Any], limits: tuple[int, int]
) -> None:
    """Raises ``InvalidInput`` if an integer constant does not fit ``t``'s integer dtype (torch
    would fail on it, or wrap it around)."""
    if values.ndim != 1 or not len(values):
        return
    if values.dtype.kind in "iub":
        low, high = int(values.min()), int(values.max())
    else:  # numpy fell back to floats or objects: an integer beyond 64 bits, or a mix of signs
        try:
            ints = [int(p) for p in payloads]
        except (TypeError, ValueError, OverflowError):
            return
        low, high = min(ints), max(ints)
    if low < limits[0] or high > limits[1]:
        bad = low if low < limits[0] else high
        raise InvalidInput(f"the integer {bad} does not fit {t!r} ({limits[0]} .. {limits[1]})")


def check_ids(op: Op, ids: np.ndarray, row: np.ndarray, values: np.ndarray | None) -> None:
    """Raises ``InvalidInput`` if an id that ``op`` reads from a constant (a ``Scalar`` of the
    input, not an op's output) is outside its table: torch would raise a bare ``IndexError``
    (or assert on a GPU) with nothing to say which input held it."""
    if values is None:
        return
    rows = row[ids]
    ids = values[rows[rows >= 0]]  # only constants have rows yet (groups are laid out later)
    if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= op.id_limit):  # type: ignore[operator]
        raise InvalidInput(f"an id outside {op.id_table}: expected 0 <= id < {op.id_limit}")
