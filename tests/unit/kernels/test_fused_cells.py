"""The fused Tree-LSTM kernels (``foldexp/kernels/treelstm.py``) against torch ops: values and
gradients, dropout masks, missing output gradients, odd sizes, threads, extreme inputs; the
switch; and the build cache (``native.py``)."""

from __future__ import annotations

import math

import pytest
import torch

from foldexp.kernels import native
from foldexp.kernels import treelstm as fused
from foldexp.models.cells import BinaryTreeLSTMCell, TreeLSTMLeaf, binary_state

needs_kernels = pytest.mark.skipif(
    native.load_kernels() is None, reason="no C++ compiler: the fused kernels cannot build"
)
pytestmark = needs_kernels
TOL = dict(rtol=2e-6, atol=2e-6)


def _torch_binary(z, cl, cr, mask):
    i, fl, fr, o, u = z.chunk(5, dim=1)
    u = torch.tanh(u) if mask is None else torch.tanh(u) * mask
    c = torch.sigmoid(i) * u + torch.sigmoid(fl) * cl + torch.sigmoid(fr) * cr
    return torch.sigmoid(o) * torch.tanh(c), c


def _torch_leaf(z, mask):
    i, o, u = z.chunk(3, dim=1)
    u = torch.tanh(u) if mask is None else torch.tanh(u) * mask
    c = torch.sigmoid(i) * u
    return torch.sigmoid(o) * torch.tanh(c), c


def _inputs(n, hidden, leaf, scale=3.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    z = (scale * torch.randn(n, (3 if leaf else 5) * hidden, generator=g)).requires_grad_()
    if leaf:
        return (z,)
    children = [torch.randn(n, hidden, generator=g).requires_grad_() for _ in range(2)]
    return (z, *children)


def _mask(n, hidden):
    keep = torch.rand(n, hidden, generator=torch.Generator().manual_seed(1)) > 0.3
    return keep.float() / 0.7


def _both(leaf, inputs, mask, which=(True, True)):
    """(values and input gradients) by the fused kernel and by torch ops."""
    n, hidden = inputs[0].shape[0], inputs[0].shape[1] // (3 if leaf else 5)
    g = torch.Generator().manual_seed(2)
    dh, dc = torch.randn(n, hidden, generator=g), torch.randn(n, hidden, generator=g)
    results = []
    for fn in (fused.leaf_state, _torch_leaf) if leaf else (fused.binary_state, _torch_binary):
        h, c = fn(*inputs, mask)
        outs = [o for o, keep in zip((h, c), which) if keep]
        grads = [d for d, keep in zip((dh, dc), which) if keep]
        results.append([h, c, *torch.autograd.grad(outs, inputs, grads, allow_unused=True)])
    return results


@pytest.mark.parametrize("leaf", [False, True], ids=["binary", "leaf"])
@pytest.mark.parametrize("n,hidden", [(1, 1), (3, 7), (47, 150), (300, 128), (0, 5)])
@pytest.mark.parametrize("masked", [False, True], ids=["", "masked"])
def test_fused_equals_torch_ops(leaf, n, hidden, masked):
    inputs = _inputs(n, hidden, leaf)
    got, want = _both(leaf, inputs, _mask(n, hidden) if masked else None)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, **TOL)


@pytest.mark.parametrize("leaf", [False, True], ids=["binary", "leaf"])
@pytest.mark.parametrize("which", [(True, False), (False, True)], ids=["h only", "c only"])
def test_an_output_without_gradient(leaf, which):
    """Autograd hands ``None`` for an unused output; the kernel reads it as zero."""
    got, want = _both(leaf, _inputs(9, 12, leaf), None, which)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, **TOL)


def test_threads_split_rows_without_changing_a_bit():
    inputs = _inputs(400, 128, False)  # 51,200 elements: above the parallel threshold
    before = torch.get_num_threads()
    try:
        runs = []
        for threads in (1, 2):
            torch.set_num_threads(threads)
            runs.append(_both(False, inputs, None)[0])
    finally:
        torch.set_num_threads(before)
    for a, b in zip(*runs):
        assert torch.equal(a, b)


def test_extreme_inputs_saturate_and_nan_propagates():
    big = [-1e30, -100.0, -88.5, -20.0, -1e-7, 0.0, 1e-7, 0.3, 0.7, 20.0, 88.5, 100.0, 1e30]
    x = torch.tensor(big + [math.inf, -math.inf])
    hidden = x.numel()
    z = x.repeat(5).view(1, -1)
    ones = torch.ones(1, hidden)
    h, c = fused.binary_state(z, ones, ones)
    want_h, want_c = _torch_binary(z, ones, ones, None)
    torch.testing.assert_close(h, want_h, **TOL)
    torch.testing.assert_close(c, want_c, **TOL)
    z[0, 3] = math.nan
    h, c = fused.binary_state(z, ones, ones)
    assert math.isnan(c[0, 3]) and math.isnan(h[0, 3]), "a NaN must not be hidden"


def test_tanh_keeps_relative_accuracy_near_zero():
    """``1 - 2/(e^2x + 1)`` cancels near 0; the kernel switches to a polynomial there."""
    x = torch.logspace(-30, 0, 200)
    z = torch.cat([torch.full((1, 200), 40.0), torch.zeros(1, 200), x.view(1, -1)], dim=1)
    _, c = fused.leaf_state(z)  # c = sigmoid(40) * tanh(x) = tanh(x)
    torch.testing.assert_close(c[0], torch.tanh(x), rtol=1e-6, atol=0)


@pytest.mark.parametrize("p", [0.0, 0.3])
def test_cells_drop_the_same_units_on_both_routes(p):
    """A cell's recurrent dropout draws the same mask fused as in torch ops (same seed)."""
    torch.manual_seed(0)
    leaf, cell = TreeLSTMLeaf(8, 16, recurrent_dropout=p), BinaryTreeLSTMCell(16, p)
    x = torch.randn(7, 8, requires_grad=True)

    def run(enabled):
        fused.set_fused_cells_enabled(enabled)
        torch.manual_seed(5)
        h, c = leaf(x)
        h2, c2 = cell((h[:3], c[:3]), (h[3:6], c[3:6]))
        loss = (h2 * torch.arange(16.0)).sum() + c2.pow(2).sum() + h.sum()
        params = [x, *cell.parameters(), *leaf.parameters()]
        return [h2, c2, *torch.autograd.grad(loss, params)]

    for a, b in zip(run(True), run(False)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_switch_off_takes_torch_ops_and_other_dtypes_never_fuse():
    z, cl, cr = (t.detach() for t in _inputs(4, 6, False))
    fused.set_fused_cells_enabled(False)
    assert not fused.applicable(z, cl, cr)
    fused.set_fused_cells_enabled(None)
    assert fused.applicable(z, cl, cr)
    assert not fused.applicable(z.double(), cl.double(), cr.double())
    h, c = binary_state(z.double(), cl.double(), cr.double())  # torch ops in float64
    assert h.dtype == torch.float64


class _Subclass(torch.Tensor):
    pass


def test_only_cpu_float32_matrices_are_fused():
    z, cl, cr = (t.detach() for t in _inputs(4, 6, False))
    assert not fused.applicable(z.unsqueeze(0), cl, cr)  # three dimensions
    assert not fused.applicable(z, cl.half(), cr)
    assert not fused.applicable(z, cl, cr.as_subclass(_Subclass))


def test_one_row_children_sliced_from_wider_rows():
    """A one-row column slice counts as contiguous with its parent's row stride; the outputs,
    allocated like it, still come out right."""
    z, cl, cr = (t.detach() for t in _inputs(1, 6, False))
    wide = torch.cat([cl, cr], dim=1)
    got = binary_state(z, wide[:, :6], wide[:, 6:])
    for a, b in zip(got, _torch_binary(z, cl, cr, None)):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("leaf", [False, True], ids=["binary", "leaf"])
def test_second_derivatives_are_autograds_own(leaf):
    """Under ``create_graph`` the backward runs torch ops, so a gradient penalty differentiates
    through it (a backward that silently stopped would make it a constant)."""
    inputs = _inputs(6, 5, leaf)
    results = []
    for fn in (fused.leaf_state, _torch_leaf) if leaf else (fused.binary_state, _torch_binary):
        h, c = fn(*inputs, None)
        first = torch.autograd.grad((h * c).sum(), inputs, create_graph=True)
        penalty = sum(g.pow(2).sum() for g in first)
        results.append(torch.autograd.grad(penalty, inputs))
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_wrong_shapes_are_named():
    with pytest.raises(ValueError, match="wanted z"):
        fused.binary_state(torch.zeros(2, 9), torch.zeros(2, 2), torch.zeros(2, 2))
    with pytest.raises(ValueError, match="not \\(n, 3H\\)"):
        fused.leaf_state(torch.zeros(2, 4))


@pytest.fixture
def fresh_build(monkeypatch, tmp_path):
    """``native`` as in a new process, its cache in ``tmp_path``."""
    monkeypatch.setenv("FOLDEXP_KERNEL_CACHE", str(tmp_path))
    for name, value in (("_tried", False), ("_loaded", None), ("_failure", None)):
        monkeypatch.setattr(native, name, value)
    return tmp_path


def test_no_compiler_falls_back_and_forcing_it_names_why(fresh_build, monkeypatch):
    monkeypatch.setattr(native, "_compiler", lambda: None)
    assert native.load_kernels() is None
    assert "no C++ compiler" in native.build_failure()
    assert not fused.fused_cells_enabled()
    with pytest.raises(RuntimeError, match="device.fused_cells=true.*no C\\+\\+ compiler"):
        fused.set_fused_cells_enabled(True)


def test_a_damaged_cached_library_is_rebuilt(fresh_build):
    """A truncated or foreign file where the library should be (never loaded before in this
    process: ``dlopen`` would hand back the loaded one by name) is built again."""
    path = native._kernels_path(native._compiler())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"not a shared object")
    lib = native.load_kernels()
    assert lib is not None and lib.foldexp_kernels_abi() == native.ABI
    assert path.stat().st_size > 1000 and not list(fresh_build.glob("*.tmp.so"))
    z, cl, cr = (t.detach() for t in _inputs(5, 8, False))
    torch.testing.assert_close(fused.binary_state(z, cl, cr), _torch_binary(z, cl, cr, None))


@pytest.mark.parametrize(
    "mask",
    [
        torch.full((1, 6), 2.0),  # broadcast: torch ops accept it, the kernel would read past it
        torch.full((5, 6), 2.0, dtype=torch.float64),
        torch.ones(5, 6, dtype=torch.bool),
        torch.full((5, 6), 2.0, requires_grad=True),
    ],
    ids=["broadcast", "float64", "bool", "trained"],
)
def test_a_mask_the_kernel_cannot_read_takes_torch_ops(mask):
    z, cl, cr = _inputs(5, 6, False)
    got = fused.binary_state(z, cl, cr, mask)
    want = _torch_binary(z, cl, cr, mask)
    torch.testing.assert_close(got, want, **TOL)
    if mask.requires_grad:
        (g,) = torch.autograd.grad(got[1].sum(), mask)
        torch.testing.assert_close(g, torch.autograd.grad(want[1].sum(), mask)[0], **TOL)


class _Pair(torch.nn.Module):
    def __init__(self, cell):
        super().__init__()
        self.cell = cell

    def forward(self, hl, cl, hr, cr):
        return self.cell((hl, cl), (hr, cr))


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch 2.13's jit.trace, make_dual
def test_tracers_and_transforms_see_torch_ops():
    """``jit.trace`` would record only the empty outputs; ``vmap`` / forward AD would meet raw
    pointers: all of them get torch ops."""
    cell = BinaryTreeLSTMCell(4)
    hl, cl, hr, cr = (torch.randn(3, 4) for _ in range(4))
    with torch.no_grad():
        traced = torch.jit.trace(_Pair(cell), (hl, cl, hr, cr))
        for a, b in zip(traced(hl, cl, hr, cr), cell((hl, cl), (hr, cr))):
            torch.testing.assert_close(a, b, **TOL)
    z, cl, cr = (t.detach() for t in _inputs(3, 4, False))
    batched = torch.func.vmap(lambda a, b, c: fused.binary_state(a[None], b[None], c[None]))
    torch.testing.assert_close(batched(z, cl, cr)[1][:, 0], _torch_binary(z, cl, cr, None)[1])
    tangent = torch.randn_like(z)
    with torch.autograd.forward_ad.dual_level():
        _, c = fused.binary_state(torch.autograd.forward_ad.make_dual(z, tangent), cl, cr)
        got = torch.autograd.forward_ad.unpack_dual(c).tangent
    _, want = torch.func.jvp(lambda a: _torch_binary(a, cl, cr, None), (z,), (tangent,))
    torch.testing.assert_close(got, want[1] if isinstance(want, tuple) else want, **TOL)


def test_a_foreign_library_in_the_cache_is_replaced_in_this_process(fresh_build, monkeypatch):
    """A library of another ABI at the cached path is rebuilt, and the rebuilt one is what this
    process loads (``dlopen`` would hand back the old one by its path)."""
    path = native._kernels_path(native._compiler())
    native.private_dir(path.parent)
    monkeypatch.setattr(native, "ABI", native.ABI + 100)
    with pytest.raises(RuntimeError, match="another ABI"):
        native._load()  # builds a good library, which this fake ABI refuses
    monkeypatch.setattr(native, "ABI", native.ABI - 100)
    lib = native.load_kernels()
    assert lib is not None and lib.foldexp_kernels_abi() == native.ABI


def test_a_cache_others_can_write_is_refused(fresh_build):
    fresh_build.chmod(0o777)
    try:
        assert native.load_kernels() is None
        assert "not a private folder" in native.build_failure()
    finally:
        fresh_build.chmod(0o700)


@pytest.mark.parametrize("masked", [False, True], ids=["", "masked"])
@pytest.mark.parametrize("which", [(True, True), (True, False), (False, True)])
def test_a_carried_memory_equals_torch_ops(masked, which):
    """``leaf_state(z, mask, carry)``: a child-sum node, ``c = i ⊙ u + carry``."""
    z, carry = _inputs(9, 12, True)[0], torch.randn(9, 12, requires_grad=True)
    mask = _mask(9, 12) if masked else None
    g = torch.Generator().manual_seed(3)
    dh, dc = torch.randn(9, 12, generator=g), torch.randn(9, 12, generator=g)
    results = []
    for fn in (fused.leaf_state, fused.leaf_state_ops):
        h, c = fn(z, mask, carry)
        outs = [o for o, keep in zip((h, c), which) if keep]
        grads = [d for d, keep in zip((dh, dc), which) if keep]
        results.append([h, c, *torch.autograd.grad(outs, (z, carry), grads)])
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, **TOL)


def test_child_sum_cells_equal_on_both_routes():
    from foldexp.models.cells import ChildSumCombine, WordChildSumCombine

    torch.manual_seed(0)
    plain, word = ChildSumCombine(6, recurrent_dropout=0.25), WordChildSumCombine(6, 0.25)
    h_sum, fc_sum, x = (torch.randn(5, k, requires_grad=True) for k in (6, 6, 24))

    def run(enabled):
        fused.set_fused_cells_enabled(enabled)
        torch.manual_seed(7)
        (h1, c1), (h2, c2) = plain(h_sum, fc_sum), word(x, h_sum, fc_sum)
        loss = (h1 * c1).sum() + (h2 - c2).pow(2).sum()
        return [h1, c1, h2, c2, *torch.autograd.grad(loss, [h_sum, fc_sum, x])]

    for a, b in zip(run(True), run(False)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_second_derivatives_with_a_carried_memory():
    z, carry = _inputs(4, 5, True)[0], torch.randn(4, 5, requires_grad=True)
    results = []
    for fn in (fused.leaf_state, fused.leaf_state_ops):
        h, c = fn(z, None, carry)
        first = torch.autograd.grad((h * c).sum(), (z, carry), create_graph=True)
        results.append(torch.autograd.grad(sum(g.pow(2).sum() for g in first), (z, carry)))
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("recurrent_dropout", [0.0, 0.3])
def test_the_engine_computes_the_same_on_both_routes(recurrent_dropout):
    """A batch of trees through ``Compiler`` (many rows per call, the executor's sweep), with the
    fused kernels and with torch ops: the same outputs and parameter gradients."""
    import numpy as np

    import foldexp.blocks as fb
    from foldexp import Compiler
    from foldexp.models.tree_lstm import binary_tree, random_tree, word_leaf

    torch.manual_seed(0)
    embed = torch.nn.Embedding(50, 8)
    leaf, cell = TreeLSTMLeaf(8, 16, recurrent_dropout), BinaryTreeLSTMCell(16, recurrent_dropout)
    model = Compiler(
        binary_tree(word_leaf(embed, leaf), cell) >> fb.GetItem(0), merge_duplicates=False
    )
    rng = np.random.default_rng(0)
    trees = [random_tree(int(rng.integers(1, 30)), 50, rng) for _ in range(40)]
    params = [*embed.parameters(), *leaf.parameters(), *cell.parameters()]

    def run(enabled):
        fused.set_fused_cells_enabled(enabled)
        torch.manual_seed(1)
        out = model(trees)
        return [out, *torch.autograd.grad((out * out.detach().sin()).sum(), params)]

    for a, b in zip(run(True), run(False)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
