"""Adding a gather's argument gradients into a buffer (``foldexp/kernels/scatter.py``): equal to
``index_add_`` of their concatenation for strided, missing and repeated rows, odd shapes and
both thread counts; bad indices refused; and the executor's backward through it equal to eager
for arguments that get no gradient."""

from __future__ import annotations

import random

import pytest
import torch
from torch import nn

import foldexp.blocks as fb
from foldexp.executor import calls
from foldexp.kernels import native, scatter
from foldexp.kernels import treelstm as fused
from foldexp.kernels.scatter import NATIVE_ELEMENTS, index_add_parts
from foldexp.testing import check_block

needs_kernels = pytest.mark.skipif(
    native.load_kernels() is None, reason="no C++ compiler: the kernels cannot build"
)


@pytest.fixture(params=["kernel", "torch"])
def route(request, monkeypatch):
    """Every size through the kernel, or every size through torch's ops."""
    monkeypatch.setattr(scatter, "NATIVE_ELEMENTS", 0 if request.param == "kernel" else 1 << 62)
    return request.param


def _expected(dst, index, parts):
    n = len(index) // len(parts)
    full = [p if p is not None else torch.zeros(n, *dst.shape[1:]) for p in parts]
    return dst.clone().index_add_(0, index, torch.cat([p.reshape(n, *dst.shape[1:]) for p in full]))


def _case(rows, cols, n, k, seed, repeats=False):
    g = torch.Generator().manual_seed(seed)
    dst = torch.randn(rows, cols, generator=g)
    if repeats:  # every part's rows drawn from a few buffer rows: many sums into one element
        index = torch.randint(0, min(rows, 3), (n * k,), generator=g)
    else:
        index = torch.randperm(rows, generator=g)[: n * k]
    wide = torch.randn(n, cols * k, generator=g)
    parts = [wide[:, j * cols : (j + 1) * cols] for j in range(k)]  # column slices
    return dst, index, parts


SIZES = [(40, 5, 3, 2), (9000, 130, 2000, 4), (300, 17, 47, 3), (64, 1, 16, 4)]


@needs_kernels
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(("rows", "cols", "n", "k"), SIZES)
def test_strided_parts_add_as_index_add_of_their_concatenation(route, threads, rows, cols, n, k):
    torch.set_num_threads(threads)
    dst, index, parts = _case(rows, cols, n, k, seed=rows + cols)
    want = _expected(dst, index, parts)
    with torch.no_grad():
        index_add_parts(dst, index, parts)
    torch.testing.assert_close(dst, want, rtol=1e-6, atol=1e-6)


@needs_kernels
@pytest.mark.parametrize("threads", [1, 2])
def test_repeated_rows_sum_in_index_order(route, threads) -> None:
    torch.set_num_threads(threads)
    dst, index, parts = _case(5000, 64, 1500, 4, seed=3, repeats=True)
    want = dst.clone()
    n = len(index) // len(parts)
    for j, part in enumerate(parts):  # the serial order: part by part, row by row
        for r in range(n):
            want[index[j * n + r]] += part[r]
    with torch.no_grad():
        index_add_parts(dst, index, parts)
    assert torch.equal(dst, want)


@needs_kernels
def test_missing_parts_add_nothing_and_odd_layouts_are_read_right(route) -> None:
    dst = torch.randn(50, 3, 4)  # rows of a (3, 4) type
    index = torch.randperm(50)[:30]
    transposed = torch.randn(4, 3, 10).permute(2, 1, 0)  # (10, 3, 4), not contiguous
    parts = [transposed, None, torch.randn(10, 3, 4)]
    want = _expected(dst, index, parts)
    with torch.no_grad():
        index_add_parts(dst, index, parts)
    torch.testing.assert_close(dst, want)
    before = dst.clone()
    index_add_parts(dst, index, [None, None, None])
    assert torch.equal(dst, before)


@needs_kernels
def test_an_index_outside_the_buffer_is_refused_before_anything_is_added() -> None:
    rows, n = 9000, 4500  # 2 parts x 4,500 rows x 8: the kernel's size
    assert 2 * n * 8 >= NATIVE_ELEMENTS
    dst = torch.zeros(rows, 8)
    for bad in (rows, -1):
        index = torch.arange(2 * n)
        index[n + 7] = bad
        with torch.no_grad(), pytest.raises(IndexError, match="outside the buffer's 9000 rows"):
            index_add_parts(dst, index, [torch.ones(n, 8), torch.ones(n, 8)])
        assert not dst.any()
    with torch.no_grad(), pytest.raises((IndexError, RuntimeError)):  # small: torch's own check
        index_add_parts(torch.zeros(10, 4), torch.tensor([0, 1, 10, 3]), [torch.ones(4, 4)])


def test_torch_ops_serve_with_the_switch_off_and_under_autograd() -> None:
    fused.set_fused_cells_enabled(False)
    dst, index, parts = _case(200, 8, 20, 2, seed=5)
    want = _expected(dst, index, parts)
    with torch.no_grad():
        index_add_parts(dst, index, parts)
    torch.testing.assert_close(dst, want)
    fused.set_fused_cells_enabled(None)
    # Differentiable where grad mode is on (a backward with create_graph): torch's own ops.
    src = torch.randn(20, 8, requires_grad=True)
    out = torch.zeros(200, 8)
    index_add_parts(out, index[:20], [src[:10], src[10:]])
    (grad,) = torch.autograd.grad(out.sum(), [src])
    assert torch.equal(grad, torch.ones(20, 8))


class _Widened(nn.Module):
    """A leaf's state: (h, a wider c)."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.widen = nn.Linear(n, n + 1)

    def forward(self, h):
        return h, self.widen(h)


class _IgnoresRightMemory(nn.Module):
    """A binary cell over states (h of n, c of n + 1) that reads both children's h but only the
    left child's c: two gathers (one per type), and the right c gets no gradient."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.mix = nn.Linear(2 * n, n)
        self.widen = nn.Linear(n, n + 1)

    def forward(self, left, right):
        (hl, cl), (hr, _cr) = left, right
        h = torch.tanh(self.mix(torch.cat([hl, hr], dim=1)))
        return h, cl * 0.5 + self.widen(h)


@pytest.mark.parametrize("kernels", [None, False])
@pytest.mark.parametrize("leaves", ["per argument", "per gather"])
def test_arguments_without_gradients_and_column_slices_through_the_sweep(
    monkeypatch, kernels, leaves
) -> None:
    fused.set_fused_cells_enabled(kernels)
    if leaves == "per argument":  # every gather's arguments as separate leaves, at any size
        monkeypatch.setattr(calls, "NATIVE_ELEMENTS", 0)
        monkeypatch.setattr(scatter, "NATIVE_ELEMENTS", 0)
    torch.manual_seed(0)
    n = 6
    embed, cell = nn.Embedding(20, n), _IgnoresRightMemory(n)
    leaf = fb.Scalar("int64") >> fb.Function(embed) >> fb.Function(_Widened(n))
    tree = fb.ForwardDeclaration()
    node = fb.OneOf(len, {1: fb.GetItem(0) >> leaf,
                          2: fb.AllOf(fb.GetItem(0) >> tree(), fb.GetItem(1) >> tree())
                          >> fb.Function(cell)})  # fmt: skip
    tree.resolve_to(node)
    trees = [((1,), ((2,), (3,))), (((4,), (5,)), ((6,), ((7,), (8,)))), (9,)]
    check_block(tree() >> fb.GetItem(0), trees)


def _pass_through_tree(cell, unary=None):
    """Trees of int leaves; pairs go through ``cell``, and 1-tuples of a subtree through
    ``unary`` (an op that returns its argument as it came)."""
    torch.manual_seed(0)
    embed = nn.Embedding(20, 6)
    tree = fb.ForwardDeclaration()
    pair = fb.AllOf(fb.GetItem(0) >> tree(), fb.GetItem(1) >> tree())
    cases = {
        1: fb.GetItem(0) >> fb.Scalar("int64") >> fb.Function(embed),
        2: pair >> fb.Function(cell),
    }
    if unary is not None:
        cases[3] = fb.GetItem(0) >> tree() >> fb.Function(unary)
    tree.resolve_to(fb.OneOf(len, cases))
    return tree() >> fb.Function(nn.Linear(6, 2))


def _random_trees(count: int, seed: int) -> list:
    """Trees of shapes mixed enough that groups read their arguments by index, not as one
    range of rows; a 3-tuple wraps a subtree in the unary op."""
    rng = random.Random(seed)

    def tree(n: int):
        if n == 1:
            return (rng.randrange(20),)
        if rng.random() < 0.3:
            return (tree(n), 0, 0)
        k = rng.randrange(1, n)
        return (tree(k), tree(n - k))

    return [tree(rng.randrange(2, 8)) for _ in range(count)]


TREES = _random_trees(40, seed=0)


@pytest.mark.parametrize("kernels", [None, False])
@pytest.mark.parametrize("leaves", ["per argument", "per gather"])
def test_an_op_that_returns_an_argument_as_it_came(monkeypatch, kernels, leaves) -> None:
    # Its argument's gradient is the output gradient it was handed: a view of the gradient
    # buffer it is then added into.
    fused.set_fused_cells_enabled(kernels)
    if leaves == "per argument":
        monkeypatch.setattr(calls, "NATIVE_ELEMENTS", 0)
        monkeypatch.setattr(scatter, "NATIVE_ELEMENTS", 0)
    check_block(_pass_through_tree(lambda left, right: left, unary=lambda h: h), TREES)
    check_block(_pass_through_tree(lambda left, right: right.view(right.shape), unary=abs), TREES)


def test_a_part_in_the_buffers_own_memory_and_a_negated_view(route) -> None:
    dst = torch.randn(40, 3)
    index = torch.arange(20, 40)
    own = dst[:10]  # rows 0-9 of the buffer, added into rows 20-29
    lazy = torch._neg_view(torch.randn(10, 3))  # negated lazily: its memory holds -values
    want = dst.clone().index_add_(0, index, torch.cat([own.clone(), lazy.resolve_neg()]))
    with torch.no_grad():
        index_add_parts(dst, index, [own, lazy])
    torch.testing.assert_close(dst, want)
    with torch.no_grad(), pytest.raises(RuntimeError):  # a part of another row shape
        index_add_parts(torch.zeros(40, 4), index, [torch.ones(10, 2, 2), torch.ones(10, 4)])
