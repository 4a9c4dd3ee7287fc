"""``foldexp.kernels.linear``: the oneDNN route equals ``F.linear`` in values and gradients."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from foldexp.kernels import (
    MIN_ROWS,
    Linear,
    linear,
    native,
    onednn_available,
    onednn_enabled,
    padded_rows,
    routed_linears,
    set_onednn_enabled,
)
from foldexp.kernels import dense as linear_module

needs_onednn = pytest.mark.skipif(not onednn_available(), reason="torch built without oneDNN")


@pytest.fixture(autouse=True)
def route_on(restore_onednn: None) -> None:
    """The route on whatever this CPU's default (these tests check the route itself)."""
    set_onednn_enabled(True)


@pytest.fixture
def onednn_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, ...]]:
    """Records the shapes of the oneDNN calls, so a test can prove which route ran."""
    calls: list[tuple[int, ...]] = []
    real = linear_module._mm

    def spy(a: torch.Tensor, b_t: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        calls.append((*a.shape, *b_t.shape))
        return real(a, b_t, bias)

    monkeypatch.setattr(linear_module, "_mm", spy)
    return calls


def _layouts(x: torch.Tensor) -> dict[str, torch.Tensor]:
    """The same values as row-major, column-major and a column slice of a wider tensor."""
    n, k = x.shape
    wide = torch.randn(n, k + 5)
    wide[:, 2 : 2 + k] = x
    return {
        "contiguous": x.clone(),
        "transposed": x.t().contiguous().t(),
        "slice": wide[:, 2 : 2 + k],
    }


def _check(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> None:
    leaves = [t.detach().clone().requires_grad_() if t is not None else None for t in (x, w, b)]
    ref = [t.detach().clone().requires_grad_() if t is not None else None for t in (x, w, b)]
    y = linear(*leaves)
    y_ref = F.linear(*ref)
    torch.testing.assert_close(y, y_ref, rtol=1e-5, atol=1e-5)
    g = torch.randn_like(y_ref)
    y.backward(g)
    y_ref.backward(g)
    for got, want in zip(leaves, ref):
        if got is not None:
            torch.testing.assert_close(got.grad, want.grad, rtol=1e-4, atol=1e-4)


@needs_onednn
@pytest.mark.parametrize("rows", [MIN_ROWS, MIN_ROWS + 17, 300])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "slice"])
@pytest.mark.parametrize("bias", [True, False])
def test_values_and_gradients_equal_f_linear(
    rows: int, layout: str, bias: bool, onednn_calls: list
) -> None:
    torch.manual_seed(rows)
    x = _layouts(torch.randn(rows, 13))[layout]
    w = torch.randn(7, 13)
    _check(x, w, torch.randn(7) if bias else None)
    # forward, input gradient, weight gradient: three oneDNN calls on zero-padded rows
    p = padded_rows(rows)
    assert onednn_calls == [(p, 13, 7, 13), (p, 7, 13, 7), (13, p, 7, p)]


@needs_onednn
def test_weight_and_input_gradients_only_when_needed(onednn_calls: list) -> None:
    n = MIN_ROWS + 3
    x = torch.randn(n, 6)  # no gradient wanted for the input
    w = torch.randn(4, 6, requires_grad=True)
    linear(x, w).sum().backward()
    p = padded_rows(n)
    assert onednn_calls == [(p, 6, 4, 6), (6, p, 4, p)]
    torch.testing.assert_close(w.grad, torch.ones(n, 4).t() @ x)


def test_padded_rows_bound_the_shapes_and_the_waste() -> None:
    counts = range(MIN_ROWS, 20_000)
    padded = [padded_rows(n) for n in counts]
    assert all(n <= p <= max(n + 7, n * 1.125) for n, p in zip(counts, padded))
    assert all(padded_rows(p) == p for p in padded)  # a padded count stays put
    octaves = np.log2(counts[-1] / counts[0])
    assert len(set(padded)) <= 8 * (octaves + 1)  # a few dozen shapes, not one per count


@pytest.mark.parametrize(
    "x",
    [
        torch.randn(MIN_ROWS - 1, 5),  # too few rows to pay
        torch.randn(MIN_ROWS, 5, dtype=torch.float64),  # oneDNN route is float32 only
        torch.randn(3, MIN_ROWS, 5),  # batch dimensions: plain F.linear
    ],
    ids=["few-rows", "float64", "3d"],
)
def test_other_inputs_take_f_linear(x: torch.Tensor, onednn_calls: list) -> None:
    w = torch.randn(4, 5, dtype=x.dtype, requires_grad=True)
    y = linear(x, w)
    y.sum().backward()
    assert onednn_calls == []
    torch.testing.assert_close(y, F.linear(x, w))


@needs_onednn
def test_switching_off_restores_f_linear(onednn_calls: list) -> None:
    old = set_onednn_enabled(False)
    try:
        assert not onednn_enabled()
        linear(torch.randn(MIN_ROWS, 5), torch.randn(3, 5))
        assert onednn_calls == []
    finally:
        set_onednn_enabled(old)
    linear(torch.randn(MIN_ROWS, 5), torch.randn(3, 5))
    assert len(onednn_calls) == 1


@needs_onednn
def test_second_order_gradients_raise_clearly() -> None:
    x = torch.randn(MIN_ROWS, 5, requires_grad=True)
    w = torch.randn(3, 5, requires_grad=True)
    (gx,) = torch.autograd.grad(linear(x, w).pow(2).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="(?i)once|differentiab"):
        gx.sum().backward()


def test_module_is_nn_linear_with_the_same_state_dict() -> None:
    torch.manual_seed(0)
    ours, plain = Linear(6, 4), nn.Linear(6, 4)
    assert isinstance(ours, nn.Linear)
    assert ours.state_dict().keys() == plain.state_dict().keys()
    ours.load_state_dict(plain.state_dict())
    x = torch.randn(MIN_ROWS + 1, 6)
    torch.testing.assert_close(ours(x), plain(x), rtol=1e-5, atol=1e-5)


@needs_onednn
def test_default_follows_the_cpu_vendor_and_family(monkeypatch: pytest.MonkeyPatch) -> None:
    # MKL runs AMD CPUs at AVX2 speed, which costs only where AVX-512 is full width (Zen 5 on).
    cases = [
        (("GenuineIntel", 6), False),
        (("AuthenticAMD", 25), False),
        (("AuthenticAMD", 26), True),
        (("AuthenticAMD", 27), True),
        (("HygonGenuine", 26), False),
        (("", 0), False),
    ]
    for identity, expected in cases:
        monkeypatch.setattr(linear_module, "cpu_vendor_family", lambda i=identity: i)
        set_onednn_enabled(None)
        assert onednn_enabled() is expected, identity
    set_onednn_enabled(False)
    assert not onednn_enabled()


def test_cpu_vendor_family_reads_the_first_processor(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text(
        "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\n\n"
        "processor\t: 1\nvendor_id\t: GenuineIntel\ncpu family\t: 6\n"
    )
    assert linear_module.cpu_vendor_family(str(info)) == ("AuthenticAMD", 26)
    assert native.cpu_fields(str(info))["cpu family"] == "26"  # the bench's model name, too
    info.unlink()
    assert linear_module.cpu_vendor_family(str(info)) == ("", 0)


@needs_onednn
def test_routed_linears_send_plain_nn_linear_through_the_route(onednn_calls: list) -> None:
    torch.manual_seed(0)
    plain = nn.Linear(16, 24)
    x = torch.randn(2 * MIN_ROWS, 16, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    with routed_linears():
        y = torch.tanh(plain(x))
    assert onednn_calls, "the plain nn.Linear did not take the route"
    y_ref = torch.tanh(F.linear(x_ref, plain.weight, plain.bias))
    torch.testing.assert_close(y, y_ref, rtol=1e-5, atol=1e-5)
    y.sum().backward()
    gx, gw = x.grad, plain.weight.grad.clone()
    plain.zero_grad()
    y_ref.sum().backward()
    torch.testing.assert_close(gx, x_ref.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gw, plain.weight.grad, rtol=1e-5, atol=1e-5)


def test_routed_linears_cost_nothing_while_the_route_is_off(onednn_calls: list) -> None:
    set_onednn_enabled(False)
    with routed_linears():
        assert torch.overrides._get_current_function_mode() is None
        nn.Linear(4, 4)(torch.randn(2 * MIN_ROWS, 4))
    assert not onednn_calls
