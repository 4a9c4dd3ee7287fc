"""The Tree-LSTM state update as one autograd node with a hand-written backward.

Given pre-activation gates ``z = [i, f_1 … f_K, o, u]`` (each ``H`` wide) and the children's
memories ``c_1 … c_K``::

    c = σ(i) ⊙ tanh(u) + Σ_k σ(f_k) ⊙ c_k,        h = σ(o) ⊙ tanh(c)

Autograd would record about fifteen elementwise nodes here, plus a chunk whose backward
concatenates five gradients and zero-fills the missing ones; on a CPU, where these tensors are
small and the work is memory-bound, that bookkeeping costs as much as the matmul. This computes
the same values and gradients with a handful of whole-gate kernels: one sigmoid over all the
sigmoid gates, and the gate gradient written straight into one ``(n, (K+3)·H)`` tensor that the
gate matmul's backward consumes. ``K = 0`` is a leaf (``c = σ(i) ⊙ tanh(u)``).
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["tree_lstm_update"]


class _TreeLSTMUpdate(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, z: torch.Tensor, *cs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        k = len(cs)
        hid = z.shape[1] // (k + 3)
        s = torch.sigmoid(z[:, : (k + 2) * hid])  # i, f_1..f_K, o
        tu = torch.tanh(z[:, (k + 2) * hid :])
        c = s[:, :hid] * tu
        for j, cj in enumerate(cs):
            c.addcmul_(s[:, (j + 1) * hid : (j + 2) * hid], cj)
        tc = torch.tanh(c)
        h = s[:, (k + 1) * hid :] * tc
        ctx.save_for_backward(s, tu, tc, *cs)
        return h, c

    @staticmethod
    def backward(ctx: Any, gh: torch.Tensor | None, gc: torch.Tensor | None) -> tuple[Any, ...]:
        s, tu, tc, *cs = ctx.saved_tensors
        k = len(cs)
        hid = tu.shape[1]
        si, so = s[:, :hid], s[:, (k + 1) * hid :]
        if gh is None:
            gh = torch.zeros_like(tc)
        # dL/dc: through h = σ(o)·tanh(c), plus what reaches c directly.
        dc = gh * so
        dc.mul_(1 - tc * tc)
        if gc is not None:
            dc.add_(gc)
        dz = torch.empty(s.shape[0], (k + 3) * hid, dtype=s.dtype, device=s.device)
        # Upstream of each sigmoid gate, then all multiplied by σ' = s(1 - s) at once.
        torch.mul(dc, tu, out=dz[:, :hid])
        for j, cj in enumerate(cs):
            torch.mul(dc, cj, out=dz[:, (j + 1) * hid : (j + 2) * hid])
        torch.mul(gh, tc, out=dz[:, (k + 1) * hid : (k + 2) * hid])
        dz[:, : (k + 2) * hid].mul_(s * (1 - s))
        torch.mul(dc, si, out=dz[:, (k + 2) * hid :])
        dz[:, (k + 2) * hid :].mul_(1 - tu * tu)
        dcs = [
            dc * s[:, (j + 1) * hid : (j + 2) * hid] if ctx.needs_input_grad[j + 1] else None
            for j in range(k)
        ]
        return (dz, *dcs)


def tree_lstm_update(z: torch.Tensor, *cs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(h, c)`` from gates ``z = [i, f_1 … f_K, o, u]`` and children's memories ``cs``."""
    return _TreeLSTMUpdate.apply(z, *cs)
