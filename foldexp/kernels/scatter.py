"""Adding a group's argument gradients into a gradient buffer at their rows, in one pass.

The executor reads the arguments of one type with a single gather: rows ``index[k*n:(k+1)*n]``
are argument ``k``. Its backward has one gradient per argument, and ``index_add_parts`` adds
them where they came from: ``dst.index_add_(0, index, torch.cat(parts))`` without the
concatenation. Where the C++ kernel serves (``scatter_rows.cpp``: CPU float32, the kernels built
and switched on), each part is read where it lies, column slices included (torch's
``index_add_`` is 4x slower on those); elsewhere torch's ops do the same sum. (A Triton kernel
doing the same on CUDA, one launch instead of the concatenation's and ``index_add_``'s, made
SST's epoch on an H200 slower, 6.35 → 7.75 s: on a GPU these small calls cost host time, and a
Triton launch costs the host more than two torch ops; see docs/PERFORMANCE.md.)

Sums: the kernel adds rows into each element in index order, as torch's serial ``index_add_``
does; torch's parallel one may group them otherwise, so the two agree to float rounding.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Sequence

import torch

from foldexp.kernels.native import fused_cells_enabled, load_kernels, transforms_active

__all__ = ["index_add_parts"]

_PLAIN = (torch.Tensor, torch.nn.Parameter)

# Below this many elements torch's concatenation and index_add_ serve: the copy the kernel saves
# is small there, and at SST's groups (4 x 47 rows of 150) the kernel measured slower in a
# training step (29 against 25 us a call), though not alone.
NATIVE_ELEMENTS = 1 << 16


def index_add_parts(
    dst: torch.Tensor, index: torch.Tensor, parts: Sequence[torch.Tensor | None]
) -> None:
    """Adds part ``k`` (``n`` rows, ``n = len(index) // len(parts)``) into the rows
    ``index[k*n:(k+1)*n]`` of ``dst``, in place; a ``None`` part adds nothing.

    Raises:
        IndexError: an index outside ``dst``'s rows, where the kernel serves (nothing is added
            then); torch's ``index_add_`` raises its own error elsewhere.
    """
    parts = [_outside(p, dst) for p in parts]
    present = [p for p in parts if p is not None]
    if not present:
        return
    if len(index) * _row_size(dst) >= NATIVE_ELEMENTS and _native(dst, index, parts, present):
        return
    if len(present) == len(parts):
        dst.index_add_(0, index, present[0] if len(present) == 1 else torch.cat(present))
        return
    n = len(index) // len(parts)
    for k, part in enumerate(parts):
        if part is not None:
            dst.index_add_(0, index[k * n : (k + 1) * n], part)


def _outside(part: torch.Tensor | None, dst: torch.Tensor) -> torch.Tensor | None:
    """``part``, or a copy of it where it lies in ``dst``'s memory. An op that returns an
    argument as it came (or a view of it) gets back the gradient it was handed, which in the
    executor's backward is a view of the very buffer it is added into: torch refuses that
    overlap, and the kernel's sums would depend on their order."""
    if part is None:
        return None
    try:
        start, at = dst.data_ptr(), part.data_ptr()
    except RuntimeError:  # no storage to compare (a transform's wrapper): torch's ops decide
        return part
    return part.clone() if start <= at < start + dst.numel() * dst.element_size() else part


def _row_size(t: torch.Tensor) -> int:
    return math.prod(t.shape[1:])


def _native(
    dst: torch.Tensor,
    index: torch.Tensor,
    parts: Sequence[torch.Tensor | None],
    present: list[torch.Tensor],
) -> bool:
    """Runs the kernel where it applies; ``False`` where torch must."""
    if not _fits(dst, index, present) or len(index) % len(parts):
        return False
    lib = load_kernels()
    if lib is None or not fused_cells_enabled() or transforms_active():
        return False
    n = len(index) // len(parts)
    cols = _row_size(dst)
    ptrs, strides = [], []
    keep = []  # contiguous copies of odd layouts, alive until the kernel has read them
    for part in parts:
        if part is None:
            ptrs.append(None)
            strides.append(0)
            continue
        if part.shape[0] != n or part.shape[1:] != dst.shape[1:]:
            return False  # torch's index_add_ names the mismatch
        if not (part.dim() == 2 and part.stride(1) == 1) and not part.is_contiguous():
            part = part.contiguous()
            keep.append(part)
        ptrs.append(part.data_ptr())
        strides.append(part.stride(0))
    k = len(parts)
    status = lib.scatter_add_rows(
        k, n, cols, dst.data_ptr(), dst.shape[0], index.data_ptr(),
        ctypes.cast((ctypes.c_void_p * k)(*ptrs), ctypes.c_void_p),
        ctypes.cast((ctypes.c_int64 * k)(*strides), ctypes.c_void_p),
    )  # fmt: skip
    if status != 0:
        raise IndexError(f"index_add_parts: an index is outside the buffer's {dst.shape[0]} rows")
    return True


def _fits(dst: torch.Tensor, index: torch.Tensor, present: list[torch.Tensor]) -> bool:
    """Plain CPU float32 tensors, a contiguous destination, int64 indices, nothing that
    autograd should see (the sweep's own backward runs with grad mode off)."""
    if torch.is_grad_enabled() or dst.requires_grad:
        return False
    if type(dst) not in _PLAIN or dst.device.type != "cpu" or dst.dtype != torch.float32:
        return False
    if not dst.is_contiguous() or dst.dim() < 1:
        return False
    if type(index) not in _PLAIN or index.device.type != "cpu" or index.dtype != torch.int64:
        return False
    if index.dim() != 1 or not index.is_contiguous():
        return False
    return all(
        type(p) in _PLAIN
        and p.device.type == "cpu"
        and p.dtype == torch.float32
        and p.dim() >= 1
        and not p.is_neg()  # a lazily negated view: its memory holds the values unnegated
        for p in present
    )
