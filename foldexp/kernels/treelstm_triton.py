"""The Tree-LSTM state updates (binary; leaf and child-sum) as one Triton kernel each way, for
CUDA; the kernels are in ``triton_kernels``.

On a GPU the update's cost is launches, not arithmetic: ``treelstm_few`` computes it in 7 torch
ops forward and 10 backward, each a kernel launch and some microseconds of host time, for a few
thousand elements a depth. Here the whole update is one kernel forward and one backward:

- forward: each element ``(r, j)`` reads the five gate inputs ``z[r, j + kH]`` and the
  children's memories, and writes ``c = i u + f_l c_l + f_r c_r`` and ``h = o tanh(c)``;
- backward: from ``z``, the children's memories and ``c`` (saved: nothing else is kept) it
  recomputes the gates and writes ``dz`` (all five gates' columns), ``dc_l`` and ``dc_r``;
- the leaf's (gates i, o, u; a child-sum node adds its carried memory to ``c``) the same way,
  writing ``dz`` and the carry's gradient.

Each call's results are parts of one block from ``arena.scratch_empty`` (none allocated where
the executor opened an arena for the pass).

Arithmetic is in float32 (the route takes float32 tensors only); ``tanh`` is
``2 sigmoid(2x) - 1``, which agrees with torch's to about 2e-7 absolute. Triton is imported, and
the kernels compiled, on the first CUDA call; where Triton is absent or the switch is off
(``set_triton_cells_enabled``), ``treelstm_few`` keeps its torch ops. ``TRITON_INTERPRET=1``
runs the same kernels on the CPU (``tests/unit/kernels/test_triton_cell.py``).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
from typing import Any

import torch

from foldexp.kernels.arena import scratch_empty

__all__ = [
    "binary_backward",
    "binary_forward",
    "launching_on",
    "leaf_backward",
    "leaf_forward",
    "set_triton_cells_enabled",
    "triton_cells_enabled",
    "triton_route",
]

_BLOCK = 512
_enabled = True


def triton_cells_enabled() -> bool:
    """Whether CUDA's float32 Tree-LSTM updates take the Triton kernels (when Triton is
    present)."""
    return _enabled


def set_triton_cells_enabled(flag: bool) -> None:
    """Switches the Triton route on or off (benchmarks compare the two in one process)."""
    global _enabled
    _enabled = bool(flag)


@functools.cache
def _triton_present() -> bool:
    return importlib.util.find_spec("triton") is not None


def triton_route(z: torch.Tensor) -> bool:
    """Whether an update of ``z`` (checked by ``few_ops_apply``) runs in the Triton kernels:
    float32 on CUDA (or anywhere under ``TRITON_INTERPRET=1``), the switch on, Triton there."""
    on_device = z.is_cuda or os.environ.get("TRITON_INTERPRET") == "1"
    return _enabled and on_device and z.dtype == torch.float32 and _triton_present()


@functools.cache
def _kernels() -> Any:
    # Imported on first use: importing Triton costs time, and a CPU machine may not have it.
    from foldexp.kernels import triton_kernels

    return triton_kernels


def _rows(t: torch.Tensor) -> torch.Tensor:
    """``t`` with adjacent columns (its rows may be strided: the kernels take a row stride)."""
    return t if t.stride(1) == 1 else t.contiguous()


def launching_on(t: torch.Tensor) -> Any:
    """``t``'s GPU as the current one while a kernel launches: Triton launches on the current
    device (and its current stream), not the tensors', so a model on ``cuda:1`` with
    ``cuda:0`` current would hand device 1's memory to a kernel on device 0."""
    return torch.cuda.device(t.device) if t.is_cuda else contextlib.nullcontext()


_ALIGN = 32  # float32 elements: 128 bytes, so that each part's start is aligned as Triton likes


def _parts(like: torch.Tensor, n: int, widths: tuple[int, ...]) -> list[torch.Tensor]:
    """Contiguous ``(n, w)`` tensors, one per width, from one scratch block
    (``arena.scratch_empty``), each starting a multiple of 128 bytes into it, as plain tensors
    (``.data``: no op dispatched), not autograd views. A view returned by an autograd Function,
    or made without grad and written with grad, refuses in-place ops, which the torch route's
    fresh results take; the parts never overlap, so nothing needs a view's bookkeeping."""
    sizes = [n * w for w in widths]
    padded = [-(-size // _ALIGN) * _ALIGN for size in sizes]
    block = scratch_empty(sum(padded), like)
    parts, at = [], 0
    for size, step, width in zip(sizes, padded, widths):
        parts.append(block[at : at + size].view(n, width).data)
        at += step
    return parts


def _grid(n_el: int) -> tuple[int]:
    return ((n_el + _BLOCK - 1) // _BLOCK,)


def binary_forward(
    z: torch.Tensor, cl: torch.Tensor, cr: torch.Tensor, mask: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(h, c)``, contiguous ``(n, H)`` halves of one new block (``arena.scratch_empty``: one
    allocation, or none where the executor opened an arena); the inputs as ``few_ops_apply``
    takes."""
    forward = _kernels().forward
    n, hidden = cl.shape
    cl, cr = _rows(cl), _rows(cr)
    m = _rows(mask) if mask is not None else cl  # a placeholder the kernel never reads
    h, c = _parts(cl, n, (hidden, hidden))
    n_el = n * hidden
    if n_el:
        with launching_on(z):
            forward[_grid(n_el)](
                z, cl, cr, m, h, c, n_el, hidden, z.stride(0), cl.stride(0), cr.stride(0),
                m.stride(0), HAS_MASK=mask is not None, BLOCK=_BLOCK,
            )  # fmt: skip
    return h, c


def binary_backward(
    z: torch.Tensor,
    cl: torch.Tensor,
    cr: torch.Tensor,
    mask: torch.Tensor | None,
    c: torch.Tensor,
    dh: torch.Tensor | None,
    dc: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dz, dc_l, dc_r)`` from the forward's inputs, its ``c`` and the output gradients (at
    least one given); contiguous parts of one new block, as ``binary_forward``'s."""
    backward = _kernels().backward
    n, hidden = cl.shape
    cl, cr = _rows(cl), _rows(cr)
    m = _rows(mask) if mask is not None else cl
    dz, dcl, dcr = _parts(z, n, (5 * hidden, hidden, hidden))
    gh = dh.contiguous() if dh is not None else c  # placeholders are never read
    gc = dc.contiguous() if dc is not None else c
    n_el = n * hidden
    if n_el:
        with launching_on(z):
            backward[_grid(n_el)](
                z, cl, cr, m, c, gh, gc, dz, dcl, dcr, n_el, hidden, z.stride(0), cl.stride(0),
                cr.stride(0), m.stride(0), HAS_MASK=mask is not None, HAS_DH=dh is not None,
                HAS_DC=dc is not None, BLOCK=_BLOCK,
            )  # fmt: skip
    return dz, dcl, dcr


def leaf_forward(
    z: torch.Tensor, mask: torch.Tensor | None, carry: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """A leaf's (with ``carry``, a child-sum node's) ``(h, c)``, as ``binary_forward``'s; the
    inputs as ``few_ops_apply_leaf`` takes."""
    n, hidden = z.shape[0], z.shape[1] // 3
    m = _rows(mask) if mask is not None else z  # placeholders the kernel never reads
    k = _rows(carry) if carry is not None else z
    h, c = _parts(z, n, (hidden, hidden))
    n_el = n * hidden
    if n_el:
        with launching_on(z):
            _kernels().leaf_forward[_grid(n_el)](
                z, m, k, h, c, n_el, hidden, z.stride(0), m.stride(0), k.stride(0),
                HAS_MASK=mask is not None, HAS_CARRY=carry is not None, BLOCK=_BLOCK,
            )  # fmt: skip
    return h, c


def leaf_backward(
    z: torch.Tensor,
    mask: torch.Tensor | None,
    c: torch.Tensor,
    dh: torch.Tensor | None,
    dc: torch.Tensor | None,
    carry_grad: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(dz, dcarry)`` (``dcarry`` only with ``carry_grad``) from the forward's inputs, its
    ``c`` and the output gradients (at least one given); one allocation."""
    n, hidden = z.shape[0], z.shape[1] // 3
    m = _rows(mask) if mask is not None else z
    dz, *dk = _parts(z, n, (3 * hidden, hidden) if carry_grad else (3 * hidden,))
    gh = dh.contiguous() if dh is not None else c  # placeholders are never read
    gc = dc.contiguous() if dc is not None else c
    n_el = n * hidden
    if n_el:
        with launching_on(z):
            _kernels().leaf_backward[_grid(n_el)](
                z, m, c, gh, gc, dz, dk[0] if dk else c, n_el, hidden, z.stride(0), m.stride(0),
                HAS_MASK=mask is not None, HAS_DH=dh is not None, HAS_DC=dc is not None,
                HAS_DK=carry_grad, BLOCK=_BLOCK,
            )  # fmt: skip
    return dz, dk[0] if dk else None
