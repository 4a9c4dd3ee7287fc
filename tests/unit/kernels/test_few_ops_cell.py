"""The binary Tree-LSTM update in few ops (``foldexp/kernels/treelstm_few.py``), the route CUDA
takes: the same values and gradients as autograd through ``binary_state_ops`` (masks, a missing
output gradient, second derivatives), the op counts it exists for, and where it steps aside."""

from __future__ import annotations

import pytest
import torch

from foldexp.bench.overhead import count_ops
from foldexp.kernels import treelstm
from foldexp.kernels.treelstm_few import binary_state_few, few_ops_apply


def _inputs(n: int = 7, hidden: int = 4, dtype: torch.dtype = torch.float32) -> tuple:
    g = torch.Generator().manual_seed(0)
    z = (3 * torch.randn(n, 5 * hidden, generator=g, dtype=dtype)).requires_grad_()
    cl, cr = (torch.randn(n, hidden, generator=g, dtype=dtype).requires_grad_() for _ in "lr")
    return z, cl, cr


def _mask(n: int = 7, hidden: int = 4) -> torch.Tensor:
    keep = torch.rand(n, hidden, generator=torch.Generator().manual_seed(1)) > 0.3
    return keep.float() / 0.7


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("which", [(True, True), (True, False), (False, True)])
def test_values_and_gradients_equal_autograds(masked: bool, which: tuple[bool, bool]) -> None:
    z, cl, cr = _inputs()
    mask = _mask() if masked else None
    g = torch.Generator().manual_seed(2)
    dh, dc = torch.randn(7, 4, generator=g), torch.randn(7, 4, generator=g)
    results = []
    for fn in (treelstm.binary_state_ops, binary_state_few):
        h, c = fn(z, cl, cr, mask)
        outs = [o for o, keep in zip((h, c), which) if keep]
        grads = [d for d, keep in zip((dh, dc), which) if keep]
        results.append((h, c, *torch.autograd.grad(outs, (z, cl, cr), grads)))
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def test_second_derivatives_are_autograds_own() -> None:
    inputs = _inputs(n=3, hidden=2, dtype=torch.float64)
    assert torch.autograd.gradcheck(binary_state_few, inputs)
    assert torch.autograd.gradgradcheck(binary_state_few, inputs)


def test_one_update_is_few_ops_each_way() -> None:
    z, cl, cr = (t.detach().requires_grad_() for t in _inputs())
    ones = [torch.ones(7, 4)] * 2
    outs: list[torch.Tensor] = []
    forward = count_ops(lambda: outs.extend(binary_state_few(z, cl, cr)))
    backward = count_ops(lambda: torch.autograd.grad(outs, (z, cl, cr), ones))
    old: list[torch.Tensor] = []
    old_forward = count_ops(lambda: old.extend(treelstm.binary_state_ops(z, cl, cr)))
    old_backward = count_ops(lambda: torch.autograd.grad(old, (z, cl, cr), ones))
    # 8 and 10 (7 forward off the CPU, where no copy of the update's columns is made), against
    # autograd's 14 and 17 through binary_state_ops
    assert forward.not_views <= 8 < old_forward.not_views, forward.top(20)
    assert backward.not_views <= 10 < old_backward.not_views, backward.top(20)


def test_the_cuda_route_takes_it_and_transforms_keep_autograds_ops() -> None:
    z, cl, cr = _inputs()
    treelstm.set_fused_cells_enabled(False)
    sigmoids = count_ops(lambda: treelstm.binary_state(z, cl, cr)).ops["sigmoid"]
    assert sigmoids == 1
    # a tracer or function transform sees plain torch ops (one sigmoid per gate)
    dz = torch.func.grad(lambda a: treelstm.binary_state(a, cl, cr)[0].sum())(z)
    (want,) = torch.autograd.grad(treelstm.binary_state_ops(z, cl, cr)[0].sum(), z)
    torch.testing.assert_close(dz, want)


def test_other_shapes_and_trained_masks_step_aside() -> None:
    z, cl, cr = _inputs()
    assert few_ops_apply(z, cl, cr, _mask())
    assert not few_ops_apply(z, cl, cr, _mask().requires_grad_())
    assert not few_ops_apply(z, cl, cr[:1], None)  # a broadcast child
    assert not few_ops_apply(z, cl, cr.double(), None)
    assert not few_ops_apply(z[:, :-1], cl, cr, None)
    zt = z.detach().t().contiguous().t()  # (n, 5H) with columns n apart
    assert not few_ops_apply(zt, cl, cr, None)
    treelstm.set_fused_cells_enabled(False)
    torch.testing.assert_close(
        treelstm.binary_state(zt, cl, cr), treelstm.binary_state_ops(z, cl, cr)
    )
