"""Deferred weight gradients (``kernels/deferred.py``): inside a sweep, ``Linear`` layers hand
their ``(x, dy)`` rows to a collector that multiplies them in large products; the gradients equal
autograd's, and every layer the collector does not own keeps autograd's path."""

from __future__ import annotations

import threading

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

import foldexp.blocks as fb
import foldexp.kernels.deferred as deferred
from foldexp.kernels import Linear, WeightGradients, collecting_weight_gradients
from foldexp.models.tree_lstm import random_tree, tree_lstm_classifier
from foldexp.testing import check_block


def _grads_by_autograd(layer: nn.Linear, xs: list[torch.Tensor], dys: list[torch.Tensor]):
    outs = [layer(x) for x in xs]
    return torch.autograd.grad(outs, [layer.weight, layer.bias], dys)


@pytest.mark.parametrize("flush_rows", [1, 7, 10_000])
def test_collected_gradients_equal_autograds(monkeypatch, flush_rows: int) -> None:
    """Flushed after every call, every few calls, or only at the end: the same sums."""
    monkeypatch.setattr(deferred, "FLUSH_ROWS", flush_rows)
    torch.manual_seed(0)
    layer = Linear(6, 4)
    xs = [torch.randn(n, 6, requires_grad=True) for n in (3, 1, 5, 2)]
    dys = [torch.randn(x.shape[0], 4) for x in xs]
    collector = WeightGradients([layer.weight, layer.bias])
    with collecting_weight_gradients(collector):
        outs = [layer(x) for x in xs]
    collector.accepting = True
    dxs = torch.autograd.grad(outs, xs, dys)
    got = {id(p): g for p, g in collector.gradients()}
    want_w, want_b = _grads_by_autograd(layer, xs, dys)
    torch.testing.assert_close(got[id(layer.weight)], want_w)
    torch.testing.assert_close(got[id(layer.bias)], want_b)
    for dx, dy in zip(dxs, dys):
        torch.testing.assert_close(dx, dy @ layer.weight.detach())
    assert list(collector.gradients()) == []  # emptied


def test_layers_the_collector_does_not_own_keep_autograds_path() -> None:
    owned, other = Linear(3, 2), Linear(3, 2)
    collector = WeightGradients([owned.weight, owned.bias])
    x = torch.randn(4, 3)
    with collecting_weight_gradients(collector):
        other(x).sum().backward()
        with torch.no_grad():
            owned(x)  # no graph: nothing to defer
    assert other.weight.grad is not None and list(collector.gradients()) == []
    assert deferred.active_collector() is None  # restored after the context


def test_a_frozen_bias_gets_no_gradient_and_a_foreign_bias_is_not_deferred() -> None:
    layer = Linear(3, 2)
    layer.bias.requires_grad_(False)
    collector = WeightGradients([layer.weight])
    with collecting_weight_gradients(collector):
        out = layer(torch.randn(4, 3))
    collector.accepting = True
    torch.autograd.grad(out.sum(), [layer.weight], allow_unused=True)
    assert [p is layer.weight for p, _ in collector.gradients()] == [True]
    trainable_bias = Linear(3, 2)
    assert (
        WeightGradients([trainable_bias.weight]).slot(trainable_bias.weight, trainable_bias.bias)
        is None
    )


def test_one_weight_under_two_biases_is_not_deferred_twice() -> None:
    weight = nn.Parameter(torch.randn(2, 3))
    b1, b2 = nn.Parameter(torch.zeros(2)), nn.Parameter(torch.ones(2))
    collector = WeightGradients([weight, b1, b2])
    assert collector.slot(weight, b1) is not None
    assert collector.slot(weight, b2) is None


def test_the_collector_belongs_to_the_thread_that_opened_it() -> None:
    seen: list[object] = []
    with collecting_weight_gradients(WeightGradients([])):
        t = threading.Thread(target=lambda: seen.append(deferred.active_collector()))
        t.start()
        t.join()
    assert seen == [None]


@pytest.mark.parametrize("flush_rows", [1, 16, 10_000])
def test_compiled_models_agree_with_eager_whatever_the_flush(monkeypatch, rng, flush_rows) -> None:
    """A Tree-LSTM (its cell's layer called once per depth) and a chain of shared ``FC`` layers
    (one weight in every group): batched == eager, values and gradients."""
    monkeypatch.setattr(deferred, "FLUSH_ROWS", flush_rows)
    trees = [random_tree(int(k), 30, rng) for k in rng.integers(1, 12, size=7)]
    check_block(tree_lstm_classifier(30, 6, 5, 3), trees)
    fc = fb.FC(3)
    chain = fb.Map(fb.Vector(3) >> fc >> fc) >> fb.Sum()
    check_block(chain, [[[1.0, 2.0, 3.0]] * 4, [], [[0.5, -1.0, 2.0]]])


def test_the_sweep_defers_the_cells_layer(monkeypatch, rng) -> None:
    """The route is taken, not only harmless: the Tree-LSTM's layers hand their rows over."""
    calls: list[int] = []
    real_add = deferred._Slot.add

    def counting_add(self, x, dy, dy_read=None):  # type: ignore[no-untyped-def]
        calls.append(x.shape[0])
        real_add(self, x, dy, dy_read)

    monkeypatch.setattr(deferred._Slot, "add", counting_add)
    from foldexp import Compiler

    comp = Compiler(tree_lstm_classifier(30, 6, 5, 3))
    trees = [random_tree(int(k), 30, rng) for k in rng.integers(2, 12, size=5)]
    comp(trees).sum().backward()
    assert sum(calls) > len(trees)  # every node's cell row, every leaf's row, the output layer
    assert all(p.grad is not None for p in comp.parameters())


class _GradFeature(nn.Module):
    """An op whose forward runs a backward of its own (a force, -dE/dx, as a feature)."""

    def __init__(self) -> None:
        super().__init__()
        self.energy, self.out = Linear(3, 1), Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.enable_grad():
            xx = x.detach().requires_grad_()
            (force,) = torch.autograd.grad(self.energy(xx).pow(2).sum(), xx)
        return self.out(x) + force + self.energy(x)


class _Checkpointed(nn.Module):
    """An op whose body is recomputed in the backward (square layers: a transposed weight
    saved by the recomputation would still fit)."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = Linear(3, 3), Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        body = lambda v: self.b(torch.tanh(self.a(v)))  # noqa: E731
        return torch.utils.checkpoint.checkpoint(body, x, use_reentrant=False)


_VECTORS = [[[1.0, 2.0, 3.0]] * 3, [[0.5, -1.0, 2.0]]]


@pytest.mark.parametrize("op", [_GradFeature, _Checkpointed])
def test_backwards_other_than_the_sweeps_keep_their_weight_gradients(op) -> None:  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    check_block(fb.Map(fb.Vector(3) >> fb.Function(op())) >> fb.Sum(), _VECTORS)


def test_second_order_gradients_through_a_compiled_layer() -> None:
    """``create_graph`` gets differentiable weight gradients, as autograd's own."""
    from foldexp import Compiler

    torch.manual_seed(0)
    block = fb.Map(fb.Vector(3) >> fb.FC(4) >> fb.FC(3)) >> fb.Sum()
    comp = Compiler(block)
    params = list(comp.parameters())
    grads = torch.autograd.grad(comp(_VECTORS).pow(2).sum(), params, create_graph=True)
    eager = torch.stack([comp.root.eval(x) for x in _VECTORS])
    want = torch.autograd.grad(eager.pow(2).sum(), params, create_graph=True)
    for g, w in zip(grads, want):
        torch.testing.assert_close(g, w)


def test_autocast_keeps_autograds_path() -> None:
    from foldexp import Compiler

    torch.manual_seed(0)
    comp = Compiler(fb.Map(fb.Vector(3) >> fb.FC(4) >> fb.FC(3)) >> fb.Sum())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = comp(_VECTORS)
    grads = torch.autograd.grad(out.float().pow(2).sum(), list(comp.parameters()))
    assert all(g is not None and torch.isfinite(g).all() for g in grads)


@pytest.mark.skipif(not __import__("foldexp").kernels.onednn_available(), reason="no oneDNN")
@pytest.mark.usefixtures("restore_onednn")
@pytest.mark.parametrize("flush_rows", [1, 100, 10_000])
def test_the_onednn_route_defers_through_onednn(monkeypatch, rng, flush_rows: int) -> None:
    """Where dense layers take oneDNN (AMD's full-width AVX-512 CPUs by default), the deferred
    products do too (rows padded, as that route's own backward): gradients equal autograd's
    through MKL."""
    from foldexp import Compiler
    from foldexp.kernels import MIN_ROWS, set_onednn_enabled

    monkeypatch.setattr(deferred, "FLUSH_ROWS", flush_rows)
    torch.manual_seed(0)
    block = fb.Map(fb.Vector(8) >> fb.FC(16) >> fb.FC(4)) >> fb.Sum()
    inputs = [torch.randn(int(n), 8).tolist() for n in rng.integers(1, 30, size=2 * MIN_ROWS)]
    comp = Compiler(block)
    params = list(comp.parameters())
    grads = {}
    for route in (True, False):
        set_onednn_enabled(route)
        grads[route] = torch.autograd.grad(comp(inputs).pow(2).sum(), params)
    for a, b in zip(grads[True], grads[False]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(not __import__("foldexp").kernels.onednn_available(), reason="no oneDNN")
@pytest.mark.usefixtures("restore_onednn")
def test_rows_multiplied_alone_are_read_as_the_input_gradient_padded_them(monkeypatch, rng) -> None:
    """Through oneDNN, the output gradient of a call whose rows make a weight product alone is
    multiplied as the input gradient padded it, not padded again: the same gradients, bitwise."""
    from foldexp import Compiler
    from foldexp.kernels import MIN_ROWS, set_onednn_enabled

    set_onednn_enabled(True)
    monkeypatch.setattr(deferred, "FLUSH_ROWS", MIN_ROWS)
    torch.manual_seed(0)
    comp = Compiler(fb.Map(fb.Vector(8) >> fb.FC(16) >> fb.FC(4)) >> fb.Sum())
    inputs = [torch.randn(int(n), 8).tolist() for n in rng.integers(MIN_ROWS, 3 * MIN_ROWS, 4)]
    params = list(comp.parameters())
    real_add = deferred._Slot.add
    reads: list[bool] = []

    def add(self, x, dy, dy_read=None, keep=True):  # type: ignore[no-untyped-def]
        reads.append(dy_read is not None)
        real_add(self, x, dy, dy_read if keep else None)

    grads = {}
    for keep in (True, False):
        monkeypatch.setattr(
            deferred._Slot, "add", lambda s, x, dy, r=None, k=keep: add(s, x, dy, r, k)
        )
        grads[keep] = torch.autograd.grad(comp(inputs).pow(2).sum(), params)
    assert any(reads)
    for a, b in zip(grads[True], grads[False]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.skipif(not __import__("foldexp").kernels.onednn_available(), reason="no oneDNN")
@pytest.mark.usefixtures("restore_onednn")
def test_a_checkpointed_layer_defers_the_recomputed_rows() -> None:
    """Under non-reentrant checkpointing the forward runs again in the backward (here with
    another dropout mask): the deferred weight gradient reads the rows autograd saved, as
    plain autograd does, not a copy kept from the first forward."""
    from foldexp.kernels import set_onednn_enabled

    set_onednn_enabled(True)
    torch.manual_seed(0)
    layer = Linear(64, 32)
    x = torch.randn(600, 64, requires_grad=True)
    gathered = WeightGradients(list(layer.parameters()))
    weight = layer.weight.detach().clone().requires_grad_()
    bias = layer.bias.detach().clone().requires_grad_()
    runs = {
        "deferred": lambda v: layer(F.dropout(v, 0.5, True)),
        "autograd": lambda v: F.linear(F.dropout(v, 0.5, True), weight, bias),
    }
    grads = {}
    for name, body in runs.items():
        torch.manual_seed(1)
        with collecting_weight_gradients(gathered if name == "deferred" else None):
            y = checkpoint(body, x, use_reentrant=False, preserve_rng_state=False)
        torch.manual_seed(2)  # the recomputation draws another mask
        gathered.accepting = name == "deferred"
        with collecting_weight_gradients(gathered if name == "deferred" else None):
            wrt = list(layer.parameters()) if name == "deferred" else [weight]
            got = torch.autograd.grad(y.sum(), wrt, allow_unused=True)
        grads[name] = dict(gathered.gradients())[layer.weight] if name == "deferred" else got[0]
    torch.testing.assert_close(grads["deferred"], grads["autograd"], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_a_gpu_multiplies_a_steps_rows_at_once(device: str) -> None:
    # On a GPU (any device but the CPU: here ``meta``) a product's cost is its launches: rows
    # wait up to FLUSH_ROWS_GPU; the CPU multiplies every FLUSH_ROWS.
    products: list[int] = []

    def product(acc, dy, x):  # noqa: ANN001, ANN202
        products.append(x.shape[0])
        return torch.zeros(dy.shape[1], x.shape[1], device=x.device)

    weight = torch.zeros(4, 6, device=device)
    slot = WeightGradients([weight]).slot(weight, None, product)
    assert slot is not None
    for _ in range(3):
        slot.add(torch.zeros(300, 6, device=device), torch.zeros(300, 4, device=device))
    slot.flush()
    assert products == ([600, 300] if device == "cpu" else [900])
