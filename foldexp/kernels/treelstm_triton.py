"""The binary Tree-LSTM state update as one Triton kernel each way, for CUDA.

On a GPU the update's cost is launches, not arithmetic: ``treelstm_few`` computes it in 7 torch
ops forward and 10 backward, each a kernel launch and some microseconds of host time, for a few
thousand elements a depth. Here the whole update is one kernel forward and one backward:

- forward: each element ``(r, j)`` reads the five gate inputs ``z[r, j + kH]`` and the
  children's memories, and writes ``c = i u + f_l c_l + f_r c_r`` and ``h = o tanh(c)``;
- backward: from ``z``, the children's memories and ``c`` (saved: nothing else is kept) it
  recomputes the gates and writes ``dz`` (all five gates' columns), ``dc_l`` and ``dc_r``.

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

__all__ = [
    "binary_backward",
    "binary_forward",
    "set_triton_cells_enabled",
    "triton_cells_enabled",
    "triton_route",
]

_BLOCK = 512
_enabled = True


def triton_cells_enabled() -> bool:
    """Whether CUDA's float32 binary updates take the Triton kernels (when Triton is present)."""
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
def _kernels() -> tuple[Any, Any]:
    # Imported on first use: importing Triton costs time, and a CPU machine may not have it.
    from foldexp.kernels import treelstm_triton_kernels as k

    return k.forward, k.backward


def _rows(t: torch.Tensor) -> torch.Tensor:
    """``t`` with adjacent columns (its rows may be strided: the kernels take a row stride)."""
    return t if t.stride(1) == 1 else t.contiguous()


def _on(t: torch.Tensor) -> Any:
    """``t``'s GPU as the current one while a kernel launches: Triton launches on the current
    device (and its current stream), not the tensors', so a model on ``cuda:1`` with
    ``cuda:0`` current would hand device 1's memory to a kernel on device 0."""
    return torch.cuda.device(t.device) if t.is_cuda else contextlib.nullcontext()


def _grid(n_el: int) -> tuple[int]:
    return ((n_el + _BLOCK - 1) // _BLOCK,)


def binary_forward(
    z: torch.Tensor, cl: torch.Tensor, cr: torch.Tensor, mask: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(h, c)``, new contiguous ``(n, H)`` tensors; the inputs as ``few_ops_apply`` takes."""
    forward, _ = _kernels()
    n, hidden = cl.shape
    cl, cr = _rows(cl), _rows(cr)
    m = _rows(mask) if mask is not None else cl  # a placeholder the kernel never reads
    h, c = cl.new_empty((n, hidden)), cl.new_empty((n, hidden))
    n_el = n * hidden
    if n_el:
        with _on(z):
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
    least one given)."""
    _, backward = _kernels()
    n, hidden = cl.shape
    cl, cr = _rows(cl), _rows(cr)
    m = _rows(mask) if mask is not None else cl
    dz = z.new_empty((n, 5 * hidden))
    dcl, dcr = cl.new_empty((n, hidden)), cl.new_empty((n, hidden))
    gh = dh.contiguous() if dh is not None else c  # placeholders are never read
    gc = dc.contiguous() if dc is not None else c
    n_el = n * hidden
    if n_el:
        with _on(z):
            backward[_grid(n_el)](
                z, cl, cr, m, c, gh, gc, dz, dcl, dcr, n_el, hidden, z.stride(0), cl.stride(0),
                cr.stride(0), m.stride(0), HAS_MASK=mask is not None, HAS_DH=dh is not None,
                HAS_DC=dc is not None, BLOCK=_BLOCK,
            )  # fmt: skip
    return dz, dcl, dcr
