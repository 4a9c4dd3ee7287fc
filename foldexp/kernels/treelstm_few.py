"""The Tree-LSTM state updates in few torch ops, for devices without the fused C++ kernels.

``treelstm.binary_state`` runs here wherever its fused CPU kernel does not apply (CUDA, other
dtypes, the kernels switched off). Written as autograd sees it (``binary_state_ops``), one update
is 13 dispatched ops forward and 17 backward: a sigmoid per gate, a product and a sum per term,
and autograd's backward of each, plus the concatenation of the five gate gradients. On CUDA each
is a kernel launch and some microseconds of host time, and the peers' step (17 depth groups)
spends about 500 of its 747 ops there (``benchmarks/step_overhead.py``).

``binary_state_few`` computes the same update as one ``torch.autograd.Function``:

- forward (7 ops, 8 on the CPU): one sigmoid over the four sigmoid gates (columns ``[0, 4H)``
  of ``z``), one tanh of the update, ``[u; c_l; c_r]`` in one block so that ``c`` is one
  product and one sum over it, then ``tanh(c)`` and ``h``;
- backward (10 ops): every gate's gradient is written into its columns of one ``dz`` (no
  concatenation), the three memory terms' in one product over that block, the four sigmoid
  gates' derivative in one ``sigmoid_backward``, both children's memory gradients in one
  product.

It saves the sigmoid gates, ``tanh(u)``, ``tanh(c)`` and the ``[u; c_l; c_r]`` block for its
backward, and ``z`` for a backward under ``create_graph`` (a second derivative), which runs
``binary_state_ops`` under autograd instead so that higher derivatives are autograd's own.
Values agree with ``binary_state_ops`` to rounding (the sum of the three memory terms is one
reduction instead of two additions); batched == eager holds exactly, both taking this route.

On CUDA (float32, Triton present) each update's forward and backward (binary and leaf) are one
Triton kernel each (``treelstm_triton``) inside the same ``torch.autograd.Function``s.

``leaf_state_few`` does the same for ``leaf_state`` (a leaf's i, o, u gates; with ``carry`` a
child-sum node, ``c = i ⊙ u + carry``): 5 ops forward (6 on the CPU) and 9 backward instead of
autograd's 8 and 11, one sigmoid over i and o, ``addcmul`` for the carry.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from foldexp.kernels.treelstm_triton import (
    binary_backward,
    binary_forward,
    leaf_backward,
    leaf_forward,
    triton_route,
)

__all__ = ["binary_state_few", "few_ops_apply", "leaf_state_few", "few_ops_apply_leaf"]

_PLAIN = (torch.Tensor, torch.nn.Parameter)
_sigmoid_backward = torch.ops.aten.sigmoid_backward.grad_input
_tanh_backward = torch.ops.aten.tanh_backward.grad_input


def few_ops_apply(
    z: torch.Tensor, cl: torch.Tensor, cr: torch.Tensor, mask: torch.Tensor | None
) -> bool:
    """Whether ``binary_state_few`` takes these: plain matrices of one dtype and device, ``z``
    ``(n, 5H)`` with adjacent columns, children ``(n, H)``, a mask (if any) ``(n, H)`` that
    takes no gradient. Any other case (a broadcast, a tensor subclass, a trained mask) keeps
    autograd's ops."""
    if z.dim() != 2 or cl.dim() != 2:
        return False
    n, hidden = cl.shape
    # z's gates are read as an (n, 5, H) view: its columns must be one stride apart
    shapes = z.shape == (n, 5 * hidden) and z.stride(1) == 1 and cr.shape == (n, hidden)
    tensors = (z, cl, cr) if mask is None else (z, cl, cr, mask)
    same = all(type(t) in _PLAIN and t.dtype == z.dtype and t.device == z.device for t in tensors)
    return (
        shapes and same and (mask is None or (mask.shape == (n, hidden) and not mask.requires_grad))
    )


def _forward(
    z: torch.Tensor, cl: torch.Tensor, cr: torch.Tensor, mask: torch.Tensor | None
) -> tuple[torch.Tensor, ...]:
    n, hidden = cl.shape
    gates = z.view(n, 5, hidden)
    s = torch.sigmoid(gates[:, :4])  # i, f_l, f_r, o: (n, 4, H)
    zu = gates[:, 4]
    # On the CPU a tanh over a column slice is several times slower across threads than a copy
    # and a tanh together (``treelstm._tanh``); on other devices the slice is read as it is.
    t = torch.tanh(zu.contiguous() if z.is_cpu else zu)
    u = t if mask is None else t * mask
    terms = torch.stack([u, cl, cr], dim=1)
    c = (s[:, :3] * terms).sum(1)
    tc = torch.tanh(c)
    h = s[:, 3] * tc
    return h, c, s, t, terms, tc


def _through_output_gate(
    dh: torch.Tensor | None,
    dc: torch.Tensor | None,
    tc: torch.Tensor,
    o: torch.Tensor,
    do: torch.Tensor,
) -> torch.Tensor:
    """Backward through ``h = o * tanh(c)``: writes the output gate's gradient (before its
    sigmoid) into ``do`` and returns the memory's gradient, ``dc`` included. At least one of
    ``dh``, ``dc`` is given."""
    if dh is None:
        do.zero_()
        return dc  # type: ignore[return-value]
    torch.mul(dh, tc, out=do)
    dct = torch.ops.aten.tanh_backward(dh * o, tc)
    if dc is not None:
        dct.add_(dc)
    return dct


class _BinaryStateFew(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, z: torch.Tensor, cl: torch.Tensor, cr: torch.Tensor, mask: Any) -> Any:
        ctx.set_materialize_grads(False)
        ctx.triton = triton_route(z)
        if ctx.triton:  # one kernel each way; the backward recomputes the gates from z
            h, c = binary_forward(z, cl, cr, mask)
            ctx.save_for_backward(z, cl, cr, mask, c)
            return h, c
        h, c, s, t, terms, tc = _forward(z, cl, cr, mask)
        ctx.save_for_backward(z, cl, cr, mask, s, t, terms, tc)
        return h, c

    @staticmethod
    def backward(ctx: Any, dh: torch.Tensor | None, dc: torch.Tensor | None) -> Any:
        z, cl, cr, mask, *saved = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph: a backward that is itself differentiable
            return (*_through_autograd(z, cl, cr, mask, dh, dc), None)
        if dh is None and dc is None:
            return None, None, None, None
        if ctx.triton:
            return (*binary_backward(z, cl, cr, mask, saved[0], dh, dc), None)
        s, t, terms, tc = saved
        n, hidden = cl.shape
        dz = z.new_empty((n, 5, hidden))  # each gate's gradient written into its columns
        dct = _through_output_gate(dh, dc, tc, s[:, 3], dz[:, 3])
        d3 = dct.unsqueeze(1)
        sig = dz[:, :4]
        torch.mul(d3, terms, out=sig[:, :3])  # i, f_l, f_r
        _sigmoid_backward(sig, s, grad_input=sig)
        du = dct * s[:, 0]
        if mask is not None:
            du.mul_(mask)
        _tanh_backward(du, t, grad_input=dz[:, 4])
        dcl, dcr = (d3 * s[:, 1:3]).unbind(1)
        return dz.view(n, 5 * hidden), dcl, dcr, None


def _through_autograd(
    z: torch.Tensor,
    cl: torch.Tensor,
    cr: torch.Tensor,
    mask: torch.Tensor | None,
    dh: torch.Tensor | None,
    dc: torch.Tensor | None,
) -> list[torch.Tensor | None]:
    from foldexp.kernels.treelstm import _grads_through_ops, binary_state_ops

    ops: Callable[..., Any] = lambda a, b, c: binary_state_ops(a, b, c, mask)  # noqa: E731
    return _grads_through_ops(ops, (z, cl, cr), dh, dc)


def binary_state_few(
    z: torch.Tensor, cl: torch.Tensor, cr: torch.Tensor, mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(h, c)`` of binary Tree-LSTM nodes in few ops (see the module doc); the caller checks
    ``few_ops_apply`` first."""
    if torch.is_grad_enabled() and (z.requires_grad or cl.requires_grad or cr.requires_grad):
        return _BinaryStateFew.apply(z, cl, cr, mask)
    if triton_route(z):
        return binary_forward(z, cl, cr, mask)
    h, c = _forward(z, cl, cr, mask)[:2]
    return h, c


def few_ops_apply_leaf(
    z: torch.Tensor, mask: torch.Tensor | None, carry: torch.Tensor | None
) -> bool:
    """Whether ``leaf_state_few`` takes these: as ``few_ops_apply``, ``z`` ``(n, 3H)`` with
    adjacent columns, a carry and a mask (if any) ``(n, H)``."""
    if z.dim() != 2 or z.shape[1] % 3 or z.stride(1) != 1:
        return False
    want = (z.shape[0], z.shape[1] // 3)
    others = [t for t in (mask, carry) if t is not None]
    return type(z) in _PLAIN and all(
        type(t) in _PLAIN and t.shape == want and t.dtype == z.dtype and t.device == z.device
        for t in others
    ) and (mask is None or not mask.requires_grad)  # fmt: skip


def _leaf_forward(
    z: torch.Tensor, mask: torch.Tensor | None, carry: torch.Tensor | None
) -> tuple[torch.Tensor, ...]:
    n, hidden = z.shape[0], z.shape[1] // 3
    gates = z.view(n, 3, hidden)
    s = torch.sigmoid(gates[:, :2])  # i, o: (n, 2, H)
    zu = gates[:, 2]
    t = torch.tanh(zu.contiguous() if z.is_cpu else zu)  # see ``_forward``
    u = t if mask is None else t * mask
    c = s[:, 0] * u if carry is None else torch.addcmul(carry, s[:, 0], u)
    tc = torch.tanh(c)
    return s[:, 1] * tc, c, s, t, u, tc


class _LeafStateFew(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, z: torch.Tensor, mask: Any, carry: Any) -> Any:
        ctx.set_materialize_grads(False)
        ctx.triton = triton_route(z)
        if ctx.triton:  # one kernel each way, as the binary update's
            h, c = leaf_forward(z, mask, carry)
            ctx.save_for_backward(z, mask, carry, c)
            return h, c
        h, c, s, t, u, tc = _leaf_forward(z, mask, carry)
        ctx.save_for_backward(z, mask, carry, s, t, u, tc)
        return h, c

    @staticmethod
    def backward(ctx: Any, dh: torch.Tensor | None, dc: torch.Tensor | None) -> Any:
        z, mask, carry, *saved = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph: autograd's own, differentiable backward
            from foldexp.kernels.treelstm import _grads_through_ops, leaf_state_ops

            if carry is None:
                (dz,) = _grads_through_ops(lambda a: leaf_state_ops(a, mask), (z,), dh, dc)
                return dz, None, None
            ops: Callable[..., Any] = lambda a, k: leaf_state_ops(a, mask, k)  # noqa: E731
            dz, dk = _grads_through_ops(ops, (z, carry), dh, dc)
            return dz, None, dk
        if dh is None and dc is None:
            return None, None, None
        carry_grad = carry is not None and ctx.needs_input_grad[2]
        if ctx.triton:
            dz, dcarry = leaf_backward(z, mask, saved[0], dh, dc, carry_grad)
            return dz, None, dcarry
        s, t, u, tc = saved
        n, hidden = tc.shape
        dz = z.new_empty((n, 3, hidden))
        dct = _through_output_gate(dh, dc, tc, s[:, 1], dz[:, 1])
        torch.mul(dct, u, out=dz[:, 0])  # i, before its sigmoid
        sig = dz[:, :2]
        _sigmoid_backward(sig, s, grad_input=sig)
        du = dct * s[:, 0]
        if mask is not None:
            du.mul_(mask)
        _tanh_backward(du, t, grad_input=dz[:, 2])
        dcarry = dct if carry_grad else None
        return dz.view(n, 3 * hidden), None, dcarry


def leaf_state_few(
    z: torch.Tensor, mask: torch.Tensor | None = None, carry: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(h, c)`` of Tree-LSTM leaves (child-sum nodes with ``carry``) in few ops; the caller
    checks ``few_ops_apply_leaf`` first."""
    graph = z.requires_grad or (carry is not None and carry.requires_grad)
    if torch.is_grad_enabled() and graph:
        return _LeafStateFew.apply(z, mask, carry)
    if triton_route(z):
        return leaf_forward(z, mask, carry)
    h, c = _leaf_forward(z, mask, carry)[:2]
    return h, c
