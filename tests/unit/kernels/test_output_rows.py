"""Outputs written straight into the executor's buffer rows (``foldexp/kernels/output_rows.py``):
what a claim takes, the fused cells writing in place in a no-grad execution with the same values
as without, and ops whose outputs alias the claimed rows."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import foldexp.blocks as fb
from foldexp import Compiler
from foldexp.kernels import Linear, native, output_rows
from foldexp.kernels import treelstm as fused
from foldexp.models.cells import BinaryTreeLSTMCell, TreeLSTMLeaf
from foldexp.models.tree_lstm import binary_tree, random_tree, word_leaf


def test_a_claim_takes_the_offer_once_and_only_where_it_fits():
    like = torch.zeros(1)
    rows = [torch.zeros(3, 4), torch.zeros(3, 4)]
    previous = output_rows.offer(rows)
    assert output_rows.claim(1, (3, 4), like) is None  # another count
    assert output_rows.claim(2, (3, 5), like) is None  # another shape
    assert output_rows.claim(2, (3, 4), like.double()) is None  # another dtype
    assert output_rows.claim(2, (3, 4), like) is rows
    assert output_rows.claim(2, (3, 4), like) is None  # taken
    assert output_rows.withdraw(previous) is True
    assert output_rows.claim(2, (3, 4), like) is None  # nothing offered now


def test_non_contiguous_rows_are_not_claimed_and_an_unclaimed_offer_says_so():
    previous = output_rows.offer([torch.zeros(4, 3).t()])
    assert output_rows.claim(1, (3, 4), torch.zeros(1)) is None
    assert output_rows.withdraw(previous) is False


def test_a_nested_offer_restores_the_outer_one():
    outer = [torch.zeros(2, 2)]
    top = output_rows.offer(outer)
    inner = output_rows.offer([torch.zeros(5, 5)])
    assert output_rows.claim(1, (5, 5), torch.zeros(1)) is not None
    assert output_rows.withdraw(inner) is True
    assert output_rows.claim(1, (2, 2), torch.zeros(1)) is outer
    assert output_rows.withdraw(top) is True


needs_kernels = pytest.mark.skipif(
    native.load_kernels() is None, reason="no C++ compiler: the fused kernels cannot build"
)


@pytest.fixture
def restore_claims(monkeypatch):
    real = output_rows.claim
    yield lambda on: monkeypatch.setattr(output_rows, "claim", real if on else _never)
    fused.set_fused_cells_enabled(None)


def _never(*args):
    return None


def _trees(n=30, vocab=40, seed=0):
    rng = np.random.default_rng(seed)
    return [random_tree(int(rng.integers(1, 25)), vocab, rng) for _ in range(n)]


@needs_kernels
@pytest.mark.parametrize("bias", [True, False])
def test_fused_cells_and_linear_write_in_place_with_the_values_of_a_copy(
    bias, restore_claims, monkeypatch
):
    torch.manual_seed(0)
    embed, leaf, cell = nn.Embedding(40, 8), TreeLSTMLeaf(8, 16), BinaryTreeLSTMCell(16)
    classify = Linear(16, 5, bias=bias)
    tree = binary_tree(word_leaf(embed, leaf), cell)
    model = Compiler(fb.AllOf(tree >> fb.GetItem(0) >> fb.Function(classify), tree))
    trees = _trees()
    copies = []
    real_copy = torch.Tensor.copy_

    def counted_copy(t, *args, **kwargs):
        copies.append(1)
        return real_copy(t, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "copy_", counted_copy)
    with torch.no_grad():
        restore_claims(True)
        in_place, n_in_place = model(trees), len(copies)
        copies.clear()
        restore_claims(False)
        copied, n_copied = model(trees), len(copies)
    monkeypatch.undo()
    flat = lambda out: [out[0], *out[1]]  # noqa: E731
    for a, b in zip(flat(in_place), flat(copied)):
        assert torch.equal(a, b)
    plan = model.build(trees)
    assert n_copied - n_in_place == sum(len(g.outs) for g in plan.groups)  # every output
    with torch.enable_grad():  # and the differentiable route, which never claims, agrees
        for a, b in zip(flat(model(trees)), flat(copied)):
            assert torch.equal(a.detach(), b)


class _Swapped(nn.Module):
    """A cell that returns the fused kernel's results in another order, or one twice, or
    after a second update: each output aliases the rows the kernel claimed."""

    def __init__(self, how: str) -> None:
        super().__init__()
        self.how = how
        self.cell = BinaryTreeLSTMCell(16)

    def forward(self, left, right):
        h, c = self.cell(left, right)
        if self.how == "swap":
            return c, h
        if self.how == "twice":
            return h, h
        if self.how == "view":
            return c[:, :], h.view(h.shape)
        h2, c2 = self.cell((h, c), right)  # a second update: fresh tensors, read from the rows
        return h2 + c, h


def _eager(block, trees):
    return [torch.stack([t.squeeze(0) for t in block.eval(tree)]) for tree in trees]


@needs_kernels
@pytest.mark.parametrize("how", ["swap", "twice", "view", "second"])
def test_outputs_that_alias_the_claimed_rows_come_out_right(how, restore_claims):
    torch.manual_seed(0)
    embed, leaf, cell = nn.Embedding(40, 8), TreeLSTMLeaf(8, 16), _Swapped(how)
    block = binary_tree(word_leaf(embed, leaf), cell)
    model = Compiler(block)
    trees = _trees(12)
    with torch.no_grad():
        restore_claims(True)
        claimed = model(trees)
        restore_claims(False)
        copied = model(trees)
        for a, b in zip(claimed, copied):
            assert torch.equal(a, b)
        for tree, h, c in zip(trees, *claimed):
            eh, ec = block.eval(tree)
            torch.testing.assert_close(h, eh.reshape(h.shape), rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(c, ec.reshape(c.shape), rtol=1e-5, atol=1e-6)


@needs_kernels
def test_an_op_running_a_nested_execution_keeps_its_own_rows(restore_claims):
    torch.manual_seed(0)
    inner_embed, inner_leaf = nn.Embedding(40, 8), TreeLSTMLeaf(8, 16)
    inner = Compiler(fb.Scalar("int64") >> fb.Function(inner_embed) >> fb.Function(inner_leaf))

    class Outer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.cell = BinaryTreeLSTMCell(16)

        def forward(self, left, right):
            h, c = self.cell(left, right)  # claims this group's rows first
            ih, ic = inner(
                [i % 40 for i in range(h.shape[0])]
            )  # an execution of its own in between
            return h + ih, c + ic

    embed, leaf, outer = nn.Embedding(40, 8), TreeLSTMLeaf(8, 16), Outer()
    block = binary_tree(word_leaf(embed, leaf), outer)
    model = Compiler(block)
    trees = _trees(10)
    with torch.no_grad():
        restore_claims(True)
        claimed = model(trees)
        restore_claims(False)
        copied = model(trees)
    for a, b in zip(claimed, copied):
        assert torch.equal(a, b)


def test_linear_claims_only_where_its_value_is_f_linears():
    layer, x = Linear(4, 3), torch.randn(2, 4)
    cases = [
        (torch.no_grad, True),
        (torch.enable_grad, False),  # a graph's output must be its own tensor
        (lambda: torch.autocast("cpu", dtype=torch.bfloat16), False),  # computed in bfloat16
    ]
    for context, claims in cases:
        rows = [torch.empty(2, 3)]
        with torch.no_grad(), context():
            previous = output_rows.offer(rows)
            y = layer(x)
            assert output_rows.withdraw(previous) is claims
        assert (y is rows[0]) is claims
        torch.testing.assert_close(
            y.float(), torch.nn.functional.linear(x, layer.weight, layer.bias), rtol=1e-2, atol=1e-2
        )
