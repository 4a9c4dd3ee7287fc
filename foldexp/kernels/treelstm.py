"""Tree-LSTM state updates as one fused CPU kernel each way (``fused_cells.cpp``).

``binary_state(z, cl, cr, mask)`` is the binary Tree-LSTM's ``c = i ⊙ u + f_l ⊙ c_l + f_r ⊙ c_r``,
``h = o ⊙ tanh(c)`` from the gates' pre-activations ``z`` (i, f_l, f_r, o, u); ``leaf_state(z,
mask, carry)`` the leaf's ``c = i ⊙ u``, ``h = o ⊙ tanh(c)`` (i, o, u), or with ``carry`` a
child-sum node's ``c = i ⊙ u + Σ_k f_k ⊙ c_k``; ``u = tanh(z_u) ⊙ mask`` where a
recurrent-dropout mask is given. ``foldexp.models.cells`` calls them, and they run torch ops
(``*_ops``) wherever ``applicable`` does not hold. On the tape those ops are what PyTorch
captures, and under ``device.compile=inductor`` (CUDA's default where Triton is installed) what
Inductor fuses, as it does a user's cells (``executor/tape.py``); otherwise they run as they are.

Why: torch runs the binary update as about 15 kernels forward and 20 backward. At SST's groups
(47 rows of 150, 1 thread) a forward + backward takes 211 µs in torch ops and 118 µs fused; on
the peers' largest group (5,476 rows of 128, 2 threads) 9.7 ms against 3.1 ms
(``benchmarks/fused_cells.py``). Whole steps (``foldexp bench bench=peers``, 2 threads, engine
over the level batching, two alternating runs): 2.91, 3.20× on this route, 2.82, 2.96× on the
tape under Inductor, whose C++ for the same update does not match these loops yet.

Where: CPU float32 tensors, the kernels built (``native.py``), and the switch on:
``set_fused_cells_enabled(None)`` (``device.fused_cells: null``, the default) uses them when they
build, ``True`` requires them, ``False`` keeps torch ops. Values agree with torch's to about 1e-7
relative (their exp and tanh are other polynomials); the tests hold both routes to that, and
batched == one-at-a-time eager holds exactly since both take the same route.

Gradients: the forward saves its inputs, and the backward is one pass that recomputes the gates
from ``z`` (cheaper than saving and reading back 6H activations a row). Under
``create_graph=True`` (a second derivative, a gradient penalty) the backward runs the same update
in torch ops instead (``binary_state_ops``), so higher derivatives are autograd's own.
"""

from __future__ import annotations

from typing import Any

import torch

from foldexp.kernels.native import (
    fused_cells_enabled,
    load_kernels,
    set_fused_cells_enabled,
    transforms_active,
)

__all__ = [
    "binary_state",
    "leaf_state",
    "binary_state_ops",
    "leaf_state_ops",
    "applicable",
    "set_fused_cells_enabled",
    "fused_cells_enabled",
]


_PLAIN = (torch.Tensor, torch.nn.Parameter)
_F32 = torch.float32


def applicable(*tensors: torch.Tensor) -> bool:
    """Whether the fused route takes these tensors: plain CPU float32 matrices, no tracing or
    function transform, switch on."""
    # ``is_cpu`` rather than ``device.type``, which builds a device object: a served tree makes
    # this check at every one of its calls.
    for t in tensors:
        if type(t) not in _PLAIN or not t.is_cpu or t.dtype is not _F32 or t.dim() != 2:
            return False
    return fused_cells_enabled() and not transforms_active()


def _mask_fits(mask: torch.Tensor | None, rows: int, hidden: int) -> bool:
    """The kernel reads a mask as ``rows x hidden`` float32 multipliers and gives it no gradient;
    anything else (a broadcast shape, another dtype, a trained mask) takes torch ops."""
    if mask is None:
        return True
    return (
        type(mask) in _PLAIN
        and mask.device.type == "cpu"
        and mask.dtype == torch.float32
        and mask.shape == (rows, hidden)
        and not (mask.requires_grad and torch.is_grad_enabled())
    )


def _ptr(t: torch.Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


def _contiguous(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.contiguous()


def _tanh(u: torch.Tensor) -> torch.Tensor:
    # ``u`` is a column slice of the gate matmul's output. torch 2.13's CPU ``tanh`` on such a
    # slice is 6-14x slower across 2 threads than a contiguous copy and ``tanh`` together
    # (5,476 x 128: 1.87 ms against 0.29 ms; at 1 thread about even); the values are identical.
    return torch.tanh(u.contiguous())


def binary_state_ops(
    z: torch.Tensor, cl: torch.Tensor, cr: torch.Tensor, mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``binary_state`` in torch ops: any device, dtype and order of differentiation."""
    i, fl, fr, o, u = z.chunk(5, dim=1)
    u = _tanh(u) if mask is None else _tanh(u) * mask
    c = torch.sigmoid(i) * u + torch.sigmoid(fl) * cl + torch.sigmoid(fr) * cr
    return torch.sigmoid(o) * torch.tanh(c), c


def leaf_state_ops(
    z: torch.Tensor, mask: torch.Tensor | None = None, carry: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``leaf_state`` in torch ops."""
    i, o, u = z.chunk(3, dim=1)
    u = _tanh(u) if mask is None else _tanh(u) * mask
    c = torch.sigmoid(i) * u if carry is None else torch.sigmoid(i) * u + carry
    return torch.sigmoid(o) * torch.tanh(c), c


def _grads_through_ops(
    ops: Any, inputs: tuple[torch.Tensor, ...], dh: Any, dc: Any
) -> list[torch.Tensor | None]:
    """The inputs' gradients by autograd through ``ops(*inputs)``, differentiable
    (``create_graph``)."""
    with torch.enable_grad():
        h, c = ops(*inputs)
    pairs = [(o, g) for o, g in ((h, dh), (c, dc)) if g is not None]
    wrt = [x for x in inputs if x.requires_grad]
    if not pairs or not wrt:
        return [None] * len(inputs)
    grads = iter(
        torch.autograd.grad(
            [o for o, _ in pairs], wrt, [g for _, g in pairs], create_graph=True,
            allow_unused=True,
        )
    )  # fmt: skip
    return [next(grads) if x.requires_grad else None for x in inputs]


def _binary_forward(
    z: torch.Tensor, cl: torch.Tensor, cr: torch.Tensor, mask: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel's forward on checked, contiguous tensors."""
    n, hidden = cl.shape
    h, c = torch.empty_like(cl), torch.empty_like(cl)  # cl: contiguous (n, hidden) float32
    load_kernels().binary_forward(
        n, hidden, z.data_ptr(), cl.data_ptr(), cr.data_ptr(), _ptr(mask),
        h.data_ptr(), c.data_ptr(),
    )  # fmt: skip
    return h, c


def _leaf_forward(
    z: torch.Tensor, mask: torch.Tensor | None, carry: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    n, hidden = z.shape[0], z.shape[1] // 3
    h, c = z.new_empty((n, hidden)), z.new_empty((n, hidden))
    load_kernels().leaf_forward(
        n, hidden, z.data_ptr(), _ptr(mask), _ptr(carry), h.data_ptr(), c.data_ptr()
    )
    return h, c


class _BinaryState(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, z: torch.Tensor, cl: torch.Tensor, cr: torch.Tensor, mask: Any) -> Any:
        ctx.set_materialize_grads(False)
        h, c = _binary_forward(z, cl, cr, mask)
        ctx.save_for_backward(z, cl, cr, mask)
        return h, c

    @staticmethod
    def backward(ctx: Any, dh: torch.Tensor | None, dc: torch.Tensor | None) -> Any:
        z, cl, cr, mask = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph: a backward that is itself differentiable
            ops = lambda a, b, c: binary_state_ops(a, b, c, mask)  # noqa: E731
            return (*_grads_through_ops(ops, (z, cl, cr), dh, dc), None)
        n, hidden = cl.shape
        dh, dc = _contiguous(dh), _contiguous(dc)
        dz = torch.empty_like(z)
        dcl, dcr = torch.empty_like(cl), torch.empty_like(cr)
        load_kernels().binary_backward(
            n, hidden, z.data_ptr(), cl.data_ptr(), cr.data_ptr(), _ptr(mask),
            _ptr(dh), _ptr(dc), dz.data_ptr(), dcl.data_ptr(), dcr.data_ptr(),
        )  # fmt: skip
        return dz, dcl, dcr, None


class _LeafState(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, z: torch.Tensor, mask: Any, carry: Any) -> Any:
        ctx.set_materialize_grads(False)
        h, c = _leaf_forward(z, mask, carry)
        ctx.save_for_backward(z, mask, carry)
        return h, c

    @staticmethod
    def backward(ctx: Any, dh: torch.Tensor | None, dc: torch.Tensor | None) -> Any:
        z, mask, carry = ctx.saved_tensors
        if torch.is_grad_enabled():
            if carry is None:
                (dz,) = _grads_through_ops(lambda a: leaf_state_ops(a, mask), (z,), dh, dc)
                return dz, None, None
            ops = lambda a, k: leaf_state_ops(a, mask, k)  # noqa: E731
            dz, dk = _grads_through_ops(ops, (z, carry), dh, dc)
            return dz, None, dk
        n, hidden = z.shape[0], z.shape[1] // 3
        dh, dc = _contiguous(dh), _contiguous(dc)
        dz = torch.empty_like(z)
        dcarry = None if carry is None else torch.empty_like(carry)
        load_kernels().leaf_backward(
            n, hidden, z.data_ptr(), _ptr(mask), _ptr(carry), _ptr(dh), _ptr(dc),
            dz.data_ptr(), _ptr(dcarry),
        )  # fmt: skip
        return dz, None, dcarry


def _needs_graph(*tensors: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def binary_state(
    z: torch.Tensor, cl: torch.Tensor, cr: torch.Tensor, mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(h, c)`` of binary Tree-LSTM nodes: fused where ``applicable``, else torch ops."""
    n, hidden = cl.shape[0], cl.shape[-1]
    if not applicable(z, cl, cr) or not _mask_fits(mask, n, hidden):
        return binary_state_ops(z, cl, cr, mask)
    if z.shape != (n, 5 * hidden) or cr.shape != (n, hidden):
        raise ValueError(f"binary_state: z {tuple(z.shape)}, children {tuple(cl.shape)}, "
                         f"{tuple(cr.shape)}; wanted z (n, 5H) and two (n, H)")  # fmt: skip
    z, cl, cr, mask = z.contiguous(), cl.contiguous(), cr.contiguous(), _contiguous(mask)
    if _needs_graph(z, cl, cr):
        return _BinaryState.apply(z, cl, cr, mask)
    return _binary_forward(z, cl, cr, mask)


def leaf_state(
    z: torch.Tensor, mask: torch.Tensor | None = None, carry: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(h, c)`` from ``z`` (n, 3H), gates i, o, u: ``c = i ⊙ u (+ carry)``, ``h = o ⊙ tanh(c)``;
    a Tree-LSTM leaf, or with ``carry`` (n, H) a child-sum node (``carry = Σ_k f_k ⊙ c_k``)."""
    n, hidden = z.shape[0], z.shape[-1] // 3
    carried = () if carry is None else (carry,)
    if (
        not applicable(z, *carried)
        or not _mask_fits(mask, n, hidden)
        or any(tuple(k.shape) != (n, hidden) for k in carried)
    ):
        return leaf_state_ops(z, mask, carry)
    if z.shape[1] % 3:
        raise ValueError(f"leaf_state: z {tuple(z.shape)} is not (n, 3H)")
    z, mask, carry = z.contiguous(), _contiguous(mask), _contiguous(carry)
    if _needs_graph(z, *carried):
        return _LeafState.apply(z, mask, carry)
    return _leaf_forward(z, mask, carry)
