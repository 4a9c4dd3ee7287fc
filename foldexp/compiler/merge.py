"""Merging equal invocations while scheduling: each distinct computation is done once.

Two invocations of the same op whose arguments are the same values compute the same outputs,
unless the op is random (dropout in training mode, ``Function(..., random=True)``; see
``Op.is_random``). In a batch of parse trees the leaves repeat the same few thousand words, so
``Embedding >> leaf cell`` runs once per *distinct* word instead of once per leaf; consumers of
a merged invocation read its representative's rows, and the backward accumulates their
gradients there (``index_add_``), which is exactly the sum the unmerged graph would form.

The scheduler finds equal invocations by value numbering: equal scalar constants share one row,
and two invocations are equal when their argument rows are. Only invocations whose arguments
all come from merged values (repeated constants, merged invocations) are compared, so a
workload without repetition pays one boolean test per group.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from foldexp.compiler.native_trace import distinct_int64_rows

__all__ = ["distinct_rows", "distinct_scalars"]

_LIMIT = 1 << 62  # combined keys stay below this (int64)


def distinct_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct rows of an ``(n, k)`` integer array.

    Returns ``keep`` (the position of each distinct row's first occurrence, ascending), ``slot``
    (per row: the index into ``keep`` of its distinct row) and ``repeated`` (per row: whether it
    occurs more than once).
    """
    found = distinct_int64_rows(rows)  # the same, by hashing, where native code serves
    if found is not None:
        return found
    key = rows[:, 0]
    for j in range(1, rows.shape[1]):
        col = rows[:, j]
        width = int(col.max()) + 1
        if int(key.max()) * width + width >= _LIMIT:
            key = np.unique(key, return_inverse=True)[1].reshape(-1)  # dense ranks < n
        key = key * width + col
    _, first, inverse, counts = np.unique(
        key, return_index=True, return_inverse=True, return_counts=True
    )
    inverse = inverse.reshape(-1)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return first[order], rank[inverse], counts[inverse] > 1


def distinct_scalars(
    payloads: list[Any] | np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Distinct values of scalar constants: ``(values, slot, repeated)`` as in
    ``distinct_rows`` (values in ascending order), or ``None`` if they are not plain numbers
    or none repeats."""
    values = np.asarray(payloads)
    if values.dtype == object or values.ndim != 1:
        return None
    found = distinct_int64_rows(values.reshape(-1, 1)) if values.dtype == np.int64 else None
    if found is not None:  # distinct in order of first occurrence: sorted, as np.unique's
        first, slot, repeated = found
        if len(first) == len(values):
            return None
        order = np.argsort(values[first], kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        return values[first][order], rank[slot], repeated
    uniq, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    if len(uniq) == len(values):
        return None
    inverse = inverse.reshape(-1)
    return uniq, inverse, counts[inverse] > 1
