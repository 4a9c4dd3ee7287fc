"""The floor under a step: the peers' Tree-LSTM step as the fewest calls, backward by hand.

The fewest calls the peers' step can be: each depth one gather of the children's states, the gates'
product and one update kernel; backward, the update's kernel, one product and the gradients'
scatters; the weights' products once at the end. What the engine issues is the same shape (on the
tape under Inductor, the update is the kernel or two Inductor makes of torch's ops). ``floor_step``
issues those calls and nothing else (its gathers and scatters two a depth, ``h`` and ``c`` apart):
no autograd graph (the backward is written out), no engine bookkeeping, the working buffers
allocated once, outside the step (the gradients' two zeroed in it), the batch's structure known in
advance. What it costs is what the calls themselves cost at these sizes (on a CPU their arithmetic,
on a GPU mostly their launches), so ``step_overhead`` reads the engine's step minus the floor as the
engine's own overhead, and level / floor as the most any executor issuing these calls from Python
could reach against the level batching.

The update kernels are the CPU's C++ ones (``kernels/fused_cells.cpp``) or, on CUDA, Triton ones
written for the floor alone (``floor_triton.py``), the same arithmetic; where neither is present
there is no floor. The loss and every gradient equal the engine's to float rounding
(``tests/unit/bench/test_floor.py``).
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Callable
from typing import Any

import torch

from foldexp.bench.overhead import counting
from foldexp.bench.trees import number_batch

__all__ = ["floor_step"]


class _CppUpdates:
    """The CPU's update kernels on contiguous float32 rows, by pointer; each call one op in
    ``count_ops``'s count in progress (a C call dispatches nothing it could see)."""

    def __init__(self, lib: Any) -> None:
        self.lib = lib

    def binary(self, z, cl, cr, h, c) -> None:  # noqa: ANN001
        _counted("binary_forward")
        p = _pointers(z, cl, cr, h, c)
        self.lib.binary_forward(len(cl), cl.shape[1], p[0], p[1], p[2], None, p[3], p[4])

    def binary_back(self, z, cl, cr, c, dh, dc, dz, dcl, dcr) -> None:  # noqa: ANN001
        _counted("binary_backward")
        p = _pointers(z, cl, cr, dh, dc, dz, dcl, dcr)
        self.lib.binary_backward(len(cl), cl.shape[1], p[0], p[1], p[2], None, *p[3:])

    def leaf(self, z, h, c) -> None:  # noqa: ANN001
        _counted("leaf_forward")
        p = _pointers(z, h, c)
        self.lib.leaf_forward(len(z), h.shape[1], p[0], None, None, p[1], p[2])

    def leaf_back(self, z, c, dh, dc, dz) -> None:  # noqa: ANN001
        _counted("leaf_backward")
        p = _pointers(z, dh, dc, dz)
        self.lib.leaf_backward(len(z), c.shape[1], p[0], None, None, *p[1:], None)


class _TritonUpdates:
    """CUDA's update kernels (``floor_triton``): one launch over every element of the result,
    ``BLOCK`` elements a program."""

    BLOCK = 512

    def __init__(self) -> None:
        from foldexp.bench import floor_triton

        self.k = floor_triton

    def _go(self, kernel: Any, like: torch.Tensor, *args: Any, **flags: Any) -> None:
        n_el = like.numel()
        strides = flags.pop("strides")
        grid = ((n_el + self.BLOCK - 1) // self.BLOCK,)
        # Triton launches on the current device (in its interpreter, on the CPU: none to set)
        on = torch.cuda.device(like.device) if like.is_cuda else contextlib.nullcontext()
        with on:
            kernel[grid](*args, n_el, like.shape[1], *strides, BLOCK=self.BLOCK, **flags)

    def binary(self, z, cl, cr, h, c) -> None:  # noqa: ANN001
        s = (z.stride(0), cl.stride(0), cr.stride(0), cl.stride(0))
        self._go(self.k.forward, cl, z, cl, cr, cl, h, c, strides=s, HAS_MASK=False)

    def binary_back(self, z, cl, cr, c, dh, dc, dz, dcl, dcr) -> None:  # noqa: ANN001
        s = (z.stride(0), cl.stride(0), cr.stride(0), cl.stride(0))
        self._go(self.k.backward, cl, z, cl, cr, cl, c, dh, dc, dz, dcl, dcr, strides=s,
                 HAS_MASK=False, HAS_DH=True, HAS_DC=True)  # fmt: skip

    def leaf(self, z, h, c) -> None:  # noqa: ANN001
        s = (z.stride(0), z.stride(0), z.stride(0))
        self._go(self.k.leaf_forward, h, z, z, z, h, c, strides=s, HAS_MASK=False,
                 HAS_CARRY=False)  # fmt: skip

    def leaf_back(self, z, c, dh, dc, dz) -> None:  # noqa: ANN001
        s = (z.stride(0), z.stride(0))
        self._go(self.k.leaf_backward, c, z, z, c, dh, dc, dz, c, strides=s, HAS_MASK=False,
                 HAS_DH=True, HAS_DC=True, HAS_DK=False)  # fmt: skip


def _counted(name: str) -> None:
    if counting:
        counting[-1].ops[f"native.{name}"] += 1


def _pointers(*ts: torch.Tensor) -> list[int]:
    assert all(t.is_contiguous() for t in ts)
    return [t.data_ptr() for t in ts]


def _updates(device: torch.device) -> Any:
    if device.type == "cuda":
        return _TritonUpdates() if importlib.util.find_spec("triton") is not None else None
    from foldexp.kernels.native import load_kernels

    lib = load_kernels()
    return _CppUpdates(lib) if lib is not None and device.type == "cpu" else None


def floor_step(m: Any, trees: list, labels: torch.Tensor) -> Callable[[], torch.Tensor] | None:
    """One training step of the peers' workload (``peer_torch.TreeLSTMParams`` ``m``, float32)
    as the fewest calls (see the module doc): returns the loss and leaves every parameter's
    gradient in its ``.grad``; ``None`` where no update kernel serves ``m``'s device or dtype
    (the kernels read float32 only)."""
    device = m.out.weight.device
    if any(p.dtype != torch.float32 for p in m.parameters()):
        return None
    updates = _updates(device)
    if updates is None:
        return None
    word_ids, levels, root_ids = number_batch(trees)
    hidden = m.cell.hidden_size
    n_leaves, n_nodes = len(word_ids), len(word_ids) + sum(len(p) for p in levels)
    words = torch.tensor(word_ids, device=device)
    roots = torch.tensor(root_ids, device=device)
    depths, start = [], n_leaves
    for pairs in levels:  # children interleaved (l0, r0, l1, ...) and as [left; right]
        both = torch.tensor(pairs, device=device)
        depths.append((start, start + len(pairs), both.reshape(-1), both.T.reshape(-1)))
        start += len(pairs)
    inner = n_nodes - n_leaves
    new = lambda *shape: torch.empty(shape, device=device)  # noqa: E731
    hs, cs, x_all, z_all, cc_all = new(n_nodes, hidden), new(n_nodes, hidden), \
        new(inner, 2 * hidden), new(inner, 5 * hidden), new(inner, 2 * hidden)  # fmt: skip
    dz_all, dcc, dzl = new(inner, 5 * hidden), new(2 * inner, hidden), new(n_leaves, 3 * hidden)
    rows = torch.arange(len(root_ids), device=device)
    emb, leaf, cell, out = m.embed.weight, m.leaf.gates, m.cell.gates, m.out

    def step() -> torch.Tensor:
        with torch.no_grad():
            e = emb.index_select(0, words)
            zl = torch.addmm(leaf.bias, e, leaf.weight.t())
            updates.leaf(zl, hs[:n_leaves], cs[:n_leaves])
            for s, t, inter, lr in depths:
                n, o = t - s, s - n_leaves
                x, z, cc = x_all[o : o + n], z_all[o : o + n], cc_all[o : o + n].view(2 * n, -1)
                torch.index_select(hs, 0, inter, out=x.view(2 * n, hidden))
                torch.index_select(cs, 0, lr, out=cc)
                torch.addmm(cell.bias, x, cell.weight.t(), out=z)
                updates.binary(z, cc[:n], cc[n:], hs[s:t], cs[s:t])
            top = hs.index_select(0, roots)
            logits = torch.addmm(out.bias, top, out.weight.t())
            loss = torch.nn.functional.cross_entropy(logits, labels)
            # backward, by hand: d loss / d logits = (softmax - one-hot) / batch
            dl = logits.softmax(1)
            dl[rows, labels] -= 1.0
            dl /= len(root_ids)
            dh, dc = torch.zeros_like(hs), torch.zeros_like(cs)
            dh.index_add_(0, roots, dl.mm(out.weight))
            for s, t, inter, lr in reversed(depths):
                n, o = t - s, s - n_leaves
                cc, dz, d2 = cc_all[o : o + n].view(2 * n, -1), dz_all[o : o + n], dcc[: 2 * n]
                updates.binary_back(z_all[o : o + n], cc[:n], cc[n:], cs[s:t], dh[s:t], dc[s:t],
                                    dz, d2[:n], d2[n:])  # fmt: skip
                dh.index_add_(0, inter, dz.mm(cell.weight).view(2 * n, hidden))
                dc.index_add_(0, lr, d2)
            updates.leaf_back(zl, cs[:n_leaves], dh[:n_leaves], dc[:n_leaves], dzl)
            grads = {
                out.weight: dl.t().mm(top), out.bias: dl.sum(0),
                cell.weight: dz_all.t().mm(x_all), cell.bias: dz_all.sum(0),
                leaf.weight: dzl.t().mm(e), leaf.bias: dzl.sum(0),
                emb: torch.zeros_like(emb).index_add_(0, words, dzl.mm(leaf.weight)),
            }  # fmt: skip
            for p, g in grads.items():
                p.grad = g
        return loss

    return step
