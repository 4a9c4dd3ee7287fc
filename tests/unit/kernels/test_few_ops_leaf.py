"""The leaf and child-sum Tree-LSTM update in few ops (``treelstm_few.leaf_state_few``), the
route CUDA takes: values and gradients equal autograd's through ``leaf_state_ops`` (masks, a
carry, a missing output gradient), gradients against finite differences to second order, the
op counts it exists for, and a child-sum model batched == eager on that route."""

from __future__ import annotations

import pytest
import torch

from foldexp.bench.overhead import count_ops
from foldexp.kernels import treelstm
from foldexp.kernels.treelstm_few import few_ops_apply_leaf, leaf_state_few


def _inputs(n: int = 7, hidden: int = 4, dtype: torch.dtype = torch.float32) -> tuple:
    g = torch.Generator().manual_seed(0)
    z = (3 * torch.randn(n, 3 * hidden, generator=g, dtype=dtype)).requires_grad_()
    return z, torch.randn(n, hidden, generator=g, dtype=dtype).requires_grad_()


def _mask(n: int = 7, hidden: int = 4, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    keep = torch.rand(n, hidden, generator=torch.Generator().manual_seed(1)) > 0.3
    return keep.to(dtype) / 0.7


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("carried", [False, True])
@pytest.mark.parametrize("which", [(True, True), (True, False), (False, True)])
def test_values_and_gradients_equal_autograds(
    masked: bool, carried: bool, which: tuple[bool, bool]
) -> None:
    z, carry = _inputs()
    mask = _mask() if masked else None
    wrt = (z, carry) if carried else (z,)
    g = torch.Generator().manual_seed(2)
    dh, dc = torch.randn(7, 4, generator=g), torch.randn(7, 4, generator=g)
    results = []
    for fn in (treelstm.leaf_state_ops, leaf_state_few):
        h, c = fn(z, mask, carry if carried else None)
        outs = [o for o, keep in zip((h, c), which) if keep]
        grads = [d for d, keep in zip((dh, dc), which) if keep]
        results.append((h, c, *torch.autograd.grad(outs, wrt, grads)))
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("carried", [False, True])
def test_gradients_match_finite_differences_to_second_order(masked: bool, carried: bool) -> None:
    z, carry = _inputs(4, 3, torch.float64)
    mask = _mask(4, 3, torch.float64) if masked else None
    if carried:
        fn, args = (lambda a, k: leaf_state_few(a, mask, k)), (z, carry)
    else:
        fn, args = (lambda a: leaf_state_few(a, mask)), (z,)
    assert torch.autograd.gradcheck(fn, args)
    assert torch.autograd.gradgradcheck(fn, args)


@pytest.mark.parametrize("carried", [False, True])
def test_one_update_is_few_ops_each_way(carried: bool) -> None:
    z, carry = (t.detach().requires_grad_() for t in _inputs())
    k = carry if carried else None
    wrt = (z, carry) if carried else (z,)
    ones = [torch.ones(7, 4)] * 2
    outs: list[torch.Tensor] = []
    forward = count_ops(lambda: outs.extend(leaf_state_few(z, None, k)))
    backward = count_ops(lambda: torch.autograd.grad(outs, wrt, ones))
    old: list[torch.Tensor] = []
    old_forward = count_ops(lambda: old.extend(treelstm.leaf_state_ops(z, None, k)))
    old_backward = count_ops(lambda: torch.autograd.grad(old, wrt, ones))
    # 6 and 9 (5 forward off the CPU), against autograd's 9-10 and 11 through leaf_state_ops
    assert forward.not_views <= 6 < old_forward.not_views, forward.top(20)
    assert backward.not_views <= 9 < old_backward.not_views, backward.top(20)


def test_the_cuda_route_takes_it_and_other_shapes_step_aside() -> None:
    z, carry = _inputs()
    treelstm.set_fused_cells_enabled(False)  # the conftest restores the default
    count = count_ops(lambda: treelstm.leaf_state(z, None, carry))
    assert count.ops["sigmoid"] == 1, count.top(12)  # one over i and o, not one per gate
    assert not few_ops_apply_leaf(z, None, carry[:1])  # a broadcast carry: autograd's ops
    assert not few_ops_apply_leaf(z[:, :11], None, None)
    assert not few_ops_apply_leaf(z, _mask().requires_grad_(), None)  # a trained mask
    torch.testing.assert_close(  # a broadcast still computes, through autograd's ops
        treelstm.leaf_state(z, None, carry[:1])[1], treelstm.leaf_state_ops(z, None, carry[:1])[1]
    )


def test_a_child_sum_model_batched_equals_eager_on_the_cuda_route(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from foldexp.bench.overhead import cuda_route
    from foldexp.data.trees import Tree
    from foldexp.data.vocab import Vocabulary
    from foldexp.models.child_sum import ChildSumTreeLSTMClassifier
    from foldexp.testing import check_block

    torch.manual_seed(0)
    words = ["a", "good", "bad", "film"]
    model = ChildSumTreeLSTMClassifier(Vocabulary(words), 3, embed_size=5, hidden_size=4).eval()

    def tree(depth: int, k: int) -> Tree:
        if depth == 0:
            return Tree(k % 3, word=words[k % 4])
        return Tree(k % 3, children=[tree(depth - 1, k + j) for j in range(1 + k % 3)])

    carried = []  # the route taken: few ops, with a carry (the children's f ⊙ c sum)

    def spy(z: torch.Tensor, mask: torch.Tensor | None, carry: torch.Tensor | None) -> tuple:
        carried.append(carry is not None)
        return leaf_state_few(z, mask, carry)

    monkeypatch.setattr(treelstm, "leaf_state_few", spy)
    with cuda_route():
        check_block(model.compiler.root, [tree(d, k) for d in (1, 2, 3) for k in range(3)])
    assert any(carried) and not all(carried)
