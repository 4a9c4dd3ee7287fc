"""Scratch memory for the Triton route's results: one allocation per sweep pass instead of one per
group and kernel.

On CUDA the Tree-LSTM kernels (``treelstm_triton``) allocate their results: ``(h, c)`` in the
forward, ``(dz, dc_l, dc_r)`` in the backward, at every depth group. Each allocation is a call
into torch's caching allocator, an op the step dispatches like a kernel (the peers' step: 36 of
its 206). Within ``scratch_arena(name)`` (the executor opens one around each pass of a
differentiable sweep) ``scratch_empty`` carves them out of a few large blocks instead: the first
as large as the same pass needed last time, up to 16 MiB a block, so a training loop allocates
once per pass, or once per 16 MiB of results (the peers' step at hidden 128: 4 blocks, not 17
allocations, in its backward).

Only where the results live about as long as the pass anyway: the sweep keeps every group's
graph (its outputs and saved tensors) until its backward, and the backward's gradients feed the
deferred weight gradients (``deferred.py``), multiplied at its end. (The forward's block is freed
when its last group's graph is, at the end of the backward, not group by group: 2 floats per
node and hidden unit more at the backward's peak, against the 7 the weight gradients' rows
hold there on a GPU.) Outside an arena, as under
``torch.no_grad`` (where a group's results die once copied into the buffers),
``scratch_empty`` is ``new_empty``. Regions start at multiples of 128 bytes into their block
(whose start CUDA's allocator aligns to 512), an alignment Triton's kernels are compiled for;
the wrappers (``treelstm_triton._parts``) keep it for each part they cut from a region. The size
a pass starts with is the same pass's last, whatever model ran it: two models trained in turn
may each grow a block once a step.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import torch

__all__ = ["scratch_arena", "scratch_empty"]

_ALIGN_BYTES = 128
# A block holds at most this much (a larger request gets a block of its own size): what a pass
# sets aside beyond what it uses, allocated before its first use, stays bounded.
_MAX_BLOCK_BYTES = 16 << 20
_local = threading.local()
# (pass name, device, dtype) → elements the latest arena of that name handed out
_last_size: dict[tuple[str, torch.device, torch.dtype], int] = {}


class _Arena:
    def __init__(self, name: str) -> None:
        self.name = name
        self.block: torch.Tensor | None = None
        self.used = 0
        self.total = 0  # elements handed out, each rounded up to the alignment

    def take(self, numel: int, like: torch.Tensor) -> torch.Tensor:
        block = self.block
        if block is not None and (block.device != like.device or block.dtype != like.dtype):
            return like.new_empty(numel)  # one device and dtype per arena: the others allocate
        align = max(1, _ALIGN_BYTES // like.element_size())
        start = -(-self.used // align) * align
        if block is None or start + numel > block.numel():
            block = self._grow(max(numel, min(self.total, _cap(like))), like)
            start = self.used = 0
        self.total += -(-numel // align) * align  # what it takes in one block, gap included
        self.used = start + numel
        return block[start : start + numel]

    def _grow(self, numel: int, like: torch.Tensor) -> torch.Tensor:
        if self.block is None:
            last = _last_size.get((self.name, like.device, like.dtype), 0)
            numel = max(numel, min(last, _cap(like)))
        self.block = like.new_empty(numel)
        return self.block

    def close(self) -> None:
        if self.block is not None:
            _last_size[(self.name, self.block.device, self.block.dtype)] = self.total


def _cap(like: torch.Tensor) -> int:
    return _MAX_BLOCK_BYTES // like.element_size()


@contextmanager
def scratch_arena(name: str) -> Iterator[None]:
    """``scratch_empty`` carves from one arena until this context ends; ``name`` keys the size
    it starts with (the same pass's last)."""
    outer = getattr(_local, "arena", None)
    arena = _local.arena = _Arena(name)
    try:
        yield
    finally:
        arena.close()
        _local.arena = outer


def scratch_empty(numel: int, like: torch.Tensor) -> torch.Tensor:
    """An uninitialised 1-D tensor of ``numel`` elements of ``like``'s dtype and device: from
    the open arena, else ``like.new_empty``."""
    arena = getattr(_local, "arena", None)
    if arena is None:
        return like.new_empty(numel)
    return arena.take(numel, like)
