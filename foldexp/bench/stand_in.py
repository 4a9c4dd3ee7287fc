"""CUDA's Triton route, counted on a CPU: ``step_overhead``'s count of the ops a CUDA step
dispatches, without a GPU.

On CUDA the Tree-LSTM updates (binary and leaf) are Triton kernels
(``foldexp/kernels/treelstm_triton.py``), one launch each; a CPU takes torch's ops for them
instead, so ``count_ops`` there would count a route no CUDA run takes. Within
``triton_stand_in()`` the wrappers run as on CUDA (their checks, their allocations, the kernels'
arguments), and each launch is computed by torch ops that ``count_ops`` does not see, counted as
one op named ``triton.<kernel>``. Values equal the kernels' to float rounding (the tests compare
the two), so a step under the stand-in trains as one on CUDA would. The results are written
through ``.data``, as a kernel writes memory: autograd's version counters do not move (the
results are views of the executor's scratch blocks, ``kernels/arena.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import torch
from torch.utils._python_dispatch import _disable_current_modes

from foldexp.bench.overhead import counting

__all__ = ["triton_stand_in"]


class _Launch:
    """``kernel[grid](*args, **flags)``: ``compute(grid, *args, **flags)`` in torch ops, hidden
    from the count in progress, then one op in it."""

    def __init__(self, name: str, compute: Callable[..., None]) -> None:
        self.name, self.compute = name, compute

    def __getitem__(self, grid: tuple[int, ...]) -> Callable[..., None]:
        def launch(*args: Any, **flags: Any) -> None:
            with _disable_current_modes(), torch.no_grad():
                self.compute(grid, *args, **flags)
            if counting:
                counting[-1].ops[f"triton.{self.name}"] += 1

        return launch


def _through_output_gate(o, c, dh, dc, has_dh: bool, has_dc: bool):  # noqa: ANN001, ANN202
    """``(d o before its sigmoid, d c)`` through ``h = o tanh(c)``, as the kernels compute them."""
    tc = torch.tanh(c)
    do = dh * tc * o * (1 - o) if has_dh else torch.zeros_like(c)
    dct = dh * o * (1 - tc * tc) if has_dh else torch.zeros_like(c)
    return do, dct + dc if has_dc else dct


def _binary_forward(grid, z, cl, cr, m, h, c, *sizes, HAS_MASK, **_):  # noqa: ANN001, ANN202, N803
    from foldexp.kernels.treelstm import binary_state_ops

    hv, cv = binary_state_ops(z, cl, cr, m if HAS_MASK else None)
    h.data.copy_(hv)
    c.data.copy_(cv)


def _binary_backward(grid, z, cl, cr, m, c, dh, dc, dz, dcl, dcr, *sizes, HAS_MASK, HAS_DH,  # noqa: ANN001, ANN202, N803
                     HAS_DC, **_):  # fmt: skip
    n, hidden = cl.shape
    i, fl, fr, o = torch.sigmoid(z[:, : 4 * hidden]).view(n, 4, hidden).unbind(1)
    t = torch.tanh(z[:, 4 * hidden :])
    u = t * m if HAS_MASK else t
    do, dct = _through_output_gate(o, c, dh, dc, HAS_DH, HAS_DC)
    du = dct * i * (1 - t * t)
    parts = (dct * u * i * (1 - i), dct * cl * fl * (1 - fl), dct * cr * fr * (1 - fr), do)
    dz.data.copy_(torch.cat([*parts, du * m if HAS_MASK else du], dim=1))
    dcl.data.copy_(dct * fl)
    dcr.data.copy_(dct * fr)


def _leaf_forward(grid, z, m, k, h, c, *sizes, HAS_MASK, HAS_CARRY, **_):  # noqa: ANN001, ANN202, N803
    from foldexp.kernels.treelstm import leaf_state_ops

    hv, cv = leaf_state_ops(z, m if HAS_MASK else None, k if HAS_CARRY else None)
    h.data.copy_(hv)
    c.data.copy_(cv)


def _leaf_backward(grid, z, m, c, dh, dc, dz, dk, *sizes, HAS_MASK, HAS_DH, HAS_DC, HAS_DK,  # noqa: ANN001, ANN202, N803
                   **_):  # fmt: skip
    hidden = c.shape[1]
    i, o = torch.sigmoid(z[:, : 2 * hidden]).chunk(2, dim=1)
    t = torch.tanh(z[:, 2 * hidden :])
    u = t * m if HAS_MASK else t
    do, dct = _through_output_gate(o, c, dh, dc, HAS_DH, HAS_DC)
    du = dct * i * (1 - t * t)
    dz.data.copy_(torch.cat([dct * u * i * (1 - i), do, du * m if HAS_MASK else du], dim=1))
    if HAS_DK:
        dk.data.copy_(dct)


def _native(lib: Any, name: str, torch_compute: Callable[..., None]) -> Callable[..., None]:
    """The binary update's launch ``name`` (``forward``, ``backward``) as the C++ kernel (the
    same arithmetic: ``kernels/fused_cells.cpp``) where its tensors are contiguous, else
    ``torch_compute``. (The leaf's launches keep torch's ops: one group of the peers' 18.)"""

    def compute(grid, *args, **flags):  # noqa: ANN001, ANN202
        if not all(a.is_contiguous() for a in args if isinstance(a, torch.Tensor)):
            return torch_compute(grid, *args, **flags)
        z, cl, cr, m = args[:4]
        n, hidden = cl.shape
        mask = m.data_ptr() if flags["HAS_MASK"] else None
        if name == "forward":
            h, c = args[4:6]
            lib.binary_forward(n, hidden, z.data_ptr(), cl.data_ptr(), cr.data_ptr(), mask,
                               h.data_ptr(), c.data_ptr())  # fmt: skip
            return None
        dh, dc, dz, dcl, dcr = args[5:10]
        lib.binary_backward(n, hidden, z.data_ptr(), cl.data_ptr(), cr.data_ptr(), mask,
                            dh.data_ptr() if flags["HAS_DH"] else None,
                            dc.data_ptr() if flags["HAS_DC"] else None,
                            dz.data_ptr(), dcl.data_ptr(), dcr.data_ptr())  # fmt: skip
        return None

    return compute


_COMPUTE = {
    "forward": _binary_forward,
    "backward": _binary_backward,
    "leaf_forward": _leaf_forward,
    "leaf_backward": _leaf_backward,
}


@contextmanager
def triton_stand_in(native: bool = False) -> Iterator[None]:
    """CUDA's Triton route on any device, for float32 tensors with the switch on
    (``set_triton_cells_enabled``); each launch one counted op (see the module doc). With
    ``native`` (and foldexp's C++ kernels built), a binary update's launch on contiguous CPU
    tensors runs the CPU's own one-kernel update instead of torch's ops: what a step of this
    route costs the host when an update is one kernel call, as on CUDA."""
    from foldexp.kernels import treelstm_few, treelstm_triton
    from foldexp.kernels.native import load_kernels

    lib = load_kernels() if native else None
    native_names = ("forward", "backward") if lib is not None else ()
    kernels = SimpleNamespace(**{
        name: _Launch(name, _native(lib, name, compute) if name in native_names else compute)
        for name, compute in _COMPUTE.items()
    })  # fmt: skip

    def route(t: torch.Tensor) -> bool:
        return t.dtype == torch.float32 and treelstm_triton.triton_cells_enabled()

    saved = treelstm_few.triton_route, treelstm_triton._kernels
    treelstm_few.triton_route = route  # type: ignore[assignment]
    treelstm_triton._kernels = lambda: kernels  # type: ignore[assignment]
    try:
        yield
    finally:
        treelstm_few.triton_route, treelstm_triton._kernels = saved
