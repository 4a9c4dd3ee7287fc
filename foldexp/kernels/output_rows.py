"""Buffer rows an executor offers to the op it runs, so a kernel can write its results there.

Why: the executor keeps every value of a type in one buffer and copies each group's outputs into
their reserved rows (``executor/run.py``). A kernel that allocates its outputs and then has them
copied pays an allocation and a pass over memory per output: serving one 40-node tree, 17
writes of about 2.5 µs each in a 0.65 ms call; at batch 256, a copy of every node's state.

How: while a no-grad execution runs one group, the executor offers the group's output rows
(views of its buffers, one per output) with ``offer``. A kernel whose results are exactly those
-- as many tensors, each of that shape, dtype and device -- takes them with ``claim`` and writes
into them; the executor then finds its outputs already in place. The kernels that claim are the
fused Tree-LSTM updates (``treelstm.py``, an ``(h, c)`` pair) and ``linear`` (``dense.py``, one
output, by the same ``addmm`` ``F.linear`` calls on CPU: the same values to the bit). An offer
is taken at most once and withdrawn when the op returns, so a claim anywhere else finds nothing;
an op that runs an execution of its own gets its offer back afterwards.

Only results computed off autograd's graph may be claimed (a graph's outputs must be its own
tensors): the executor offers rows only in its no-grad execution, and the kernels claim only on
their no-grad route. A kernel that claims the rows for an intermediate value is still correct:
the executor copies whatever the op finally returns into the rows, and first copies out any
output that is a view (of the claimed rows, say), so no write overwrites a value still to be
read (``executor/run.py: _write``).
"""

from __future__ import annotations

import threading

import torch

__all__ = ["offer", "withdraw", "claim"]

_local = threading.local()


class _Offer:
    __slots__ = ("rows", "claimed")

    def __init__(self, rows: list[torch.Tensor] | None) -> None:
        self.rows, self.claimed = rows, False


_NONE = _Offer(None)


def offer(rows: list[torch.Tensor]) -> _Offer:
    """Offers ``rows`` (one tensor per output of the op about to run) in this thread; returns
    the offer it replaces, for ``withdraw`` (an op may run a nested execution with its own)."""
    previous = getattr(_local, "offer", _NONE)
    _local.offer = _Offer(rows)
    return previous


def withdraw(previous: _Offer) -> bool:
    """Withdraws the current offer, restoring ``previous``; returns whether a kernel claimed
    the current one."""
    claimed = _local.offer.claimed
    _local.offer = previous
    return claimed


def claim(count: int, shape: tuple[int, ...], like: torch.Tensor) -> list[torch.Tensor] | None:
    """The offered rows if there are ``count`` of them, each of ``shape`` and of ``like``'s dtype
    and device, contiguous; else ``None``. Once claimed, the offer is gone."""
    current = getattr(_local, "offer", _NONE)
    rows = current.rows
    if rows is None or len(rows) != count:
        return None
    for r in rows:
        if r.shape != shape or r.dtype != like.dtype or r.device != like.device:
            return None
        if not r.is_contiguous():
            return None
    current.rows, current.claimed = None, True
    return rows
