"""foldexp's Triton kernels (``foldexp/kernels/treelstm_triton.py``), the route a float32 CUDA
run takes: the Tree-LSTM updates give the same values and gradients as autograd through
``binary_state_ops`` / ``leaf_state_ops`` (masks, carries, one output's gradient missing, strided
rows, sizes that are no multiple of the kernels' block); checked on the CPU in Triton's
interpreter where Triton is installed and on CUDA by the gpu tests; and when the route is
taken."""

from __future__ import annotations

import contextlib
import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from foldexp.kernels import treelstm_triton
from foldexp.kernels.treelstm import binary_state_ops, leaf_state_ops
from foldexp.kernels.treelstm_few import binary_state_few, leaf_state_few

needs_triton = pytest.mark.skipif(
    importlib.util.find_spec("triton") is None, reason="Triton is not installed"
)
# (rows, hidden, masked, rows strided, which outputs take a gradient)
CASES = [
    (7, 5, False, False, "both"),
    (33, 17, True, True, "h"),
    (300, 8, False, True, "c"),
    (1, 1, True, False, "both"),
    (129, 64, True, True, "both"),
]


def largest_difference(device: str) -> float:
    """Runs every case through ``binary_state_few`` (the Triton route on ``device``) and
    ``binary_state_ops`` (autograd); the largest absolute difference of any value or gradient."""
    assert treelstm_triton.triton_route(torch.empty(1, device=device))
    g = torch.Generator(device).manual_seed(0)
    worst = 0.0
    for n, hidden, masked, strided, which in CASES:
        wide = torch.randn(n, 5 * hidden + 3, generator=g, device=device)
        z = (wide[:, 1 : 5 * hidden + 1] if strided else wide[:, : 5 * hidden].clone()) * 3
        z = z.detach().requires_grad_()
        cl, cr = (torch.randn(n, hidden, generator=g, device=device) for _ in "lr")
        cl.requires_grad_(), cr.requires_grad_()
        mask = (torch.rand(n, hidden, generator=g, device=device) > 0.3).float() if masked else None
        dh, dc = (torch.randn(n, hidden, generator=g, device=device) for _ in "hc")
        results = []
        for fn in (binary_state_few, binary_state_ops):
            h, c = fn(z, cl, cr, mask)
            outs = {"both": [(h, dh), (c, dc)], "h": [(h, dh)], "c": [(c, dc)]}[which]
            grads = torch.autograd.grad([o for o, _ in outs], (z, cl, cr), [d for _, d in outs])
            results.append((h, c, *grads))
        for a, b in zip(*results):
            worst = max(worst, (a - b).abs().max().item())
    with torch.no_grad():  # the forward alone, without an autograd node
        z = torch.randn(10, 20, generator=g, device=device)
        cl, cr = (torch.randn(10, 4, generator=g, device=device) for _ in "lr")
        h, c = binary_state_few(z, cl, cr)
        h2, c2 = binary_state_ops(z, cl, cr, None)
        worst = max(worst, (h - h2).abs().max().item(), (c - c2).abs().max().item())
    return max(worst, _leaf_difference(g, device))


def _leaf_difference(g: torch.Generator, device: str) -> float:
    """As ``largest_difference`` for leaves and child-sum nodes (``carry``)."""
    worst = 0.0
    for (n, hidden, masked, strided, which), carried in zip(
        CASES, [True, False, True, True, False]
    ):
        wide = torch.randn(n, 3 * hidden + 3, generator=g, device=device)
        z = (wide[:, 1 : 3 * hidden + 1] if strided else wide[:, : 3 * hidden].clone()) * 3
        z = z.detach().requires_grad_()
        carry = torch.randn(n, hidden, generator=g, device=device, requires_grad=True)
        carry = carry if carried else None
        mask = (torch.rand(n, hidden, generator=g, device=device) > 0.3).float() if masked else None
        dh, dc = (torch.randn(n, hidden, generator=g, device=device) for _ in "hc")
        wrt = (z,) if carry is None else (z, carry)
        results = []
        for fn in (leaf_state_few, leaf_state_ops):
            h, c = fn(z, mask, carry)
            outs = {"both": [(h, dh), (c, dc)], "h": [(h, dh)], "c": [(c, dc)]}[which]
            grads = torch.autograd.grad([o for o, _ in outs], wrt, [d for _, d in outs])
            results.append((h, c, *grads))
        for a, b in zip(*results):
            worst = max(worst, (a - b).abs().max().item())
    return worst


@needs_triton
def test_the_kernels_equal_autograd_in_tritons_interpreter(in_triton_interpreter) -> None:  # noqa: ANN001
    out = in_triton_interpreter(
        Path(__file__).parent,
        "from test_triton_cell import largest_difference; print(largest_difference('cpu'))",
    )
    assert float(out.split()[-1]) < 2e-6  # tanh as 2 sigmoid(2x) - 1: ~2e-7 off


@pytest.mark.gpu
def test_the_kernels_equal_autograd_on_cuda() -> None:
    assert largest_difference("cuda") < 2e-6


def test_the_route_is_float32_on_cuda_with_the_switch_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(treelstm_triton, "_triton_present", lambda: True)
    route = treelstm_triton.triton_route
    assert not route(torch.empty(2, 10))  # the CPU keeps torch's ops (or the C++ cell)
    assert not route(torch.empty(2, 10, dtype=torch.float64, device="meta"))
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert route(torch.empty(2, 10)) and not route(torch.empty(2, 10, dtype=torch.float64))
    treelstm_triton.set_triton_cells_enabled(False)
    try:
        assert not route(torch.empty(2, 10)) and not treelstm_triton.triton_cells_enabled()
    finally:
        treelstm_triton.set_triton_cells_enabled(True)
    monkeypatch.setattr(treelstm_triton, "_triton_present", lambda: False)
    assert not route(torch.empty(2, 10))


class _OnCuda1(torch.Tensor):
    """A CPU tensor that says it lives on ``cuda:1`` (which device the launches take)."""

    is_cuda = property(lambda self: True)
    device = property(lambda self: torch.device("cuda", 1))


def test_kernels_launch_on_the_tensors_gpu_not_the_current_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Triton launches on the current device; a model on cuda:1 must make cuda:1 current.
    current: list[object] = ["cuda:0"]
    launched_on: list[object] = []

    class Guard:
        def __init__(self, device: torch.device) -> None:
            self.device, self.before = device, None

        def __enter__(self) -> None:
            self.before, current[0] = current[0], self.device

        def __exit__(self, *_: object) -> None:
            current[0] = self.before

    class Launcher:
        def __getitem__(self, grid: object) -> object:
            return lambda *args, **kwargs: launched_on.append(current[0])

    monkeypatch.setattr(torch.cuda, "device", Guard)
    monkeypatch.setattr(treelstm_triton, "_kernels", lambda: SimpleNamespace(
        forward=Launcher(), backward=Launcher(), leaf_forward=Launcher(),
        leaf_backward=Launcher()))  # fmt: skip
    z = torch.zeros(3, 10).as_subclass(_OnCuda1)
    cl = torch.zeros(3, 2)
    h, c = treelstm_triton.binary_forward(z, cl, cl, None)
    treelstm_triton.binary_backward(z, cl, cl, None, c, h, None)
    z = torch.zeros(3, 6).as_subclass(_OnCuda1)
    h, c = treelstm_triton.leaf_forward(z, None, None)
    treelstm_triton.leaf_backward(z, None, c, h, None, False)
    assert launched_on == [torch.device("cuda", 1)] * 4


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_the_kernels_equal_autograd_on_a_second_gpu() -> None:
    with torch.cuda.device(0):
        assert largest_difference("cuda:1") < 2e-6


@pytest.mark.parametrize("grad", [True, False])
def test_a_cells_outputs_can_be_modified_in_place(grad: bool) -> None:
    # The Triton route's h and c share one block (``kernels/arena.py``); they must still be
    # plain tensors to autograd, as the torch route's are: a view returned by an autograd
    # Function, or made without grad and then written with grad, refuses an in-place op. Run
    # through ``bench/stand_in.py``, which takes the wrappers' route on the CPU.
    from foldexp.bench.stand_in import triton_stand_in

    g = torch.Generator().manual_seed(0)
    z5, z3 = torch.randn(6, 20, generator=g), torch.randn(6, 12, generator=g)
    cl, cr, carry = (torch.randn(6, 4, generator=g) for _ in range(3))
    w = torch.randn(6, 4, generator=g, requires_grad=True)
    cells = [
        lambda z: binary_state_few(z, cl, cr),
        lambda z: leaf_state_few(z, None, carry),
        lambda z: leaf_state_few(z),
    ]
    for cell, z in zip(cells, [z5, z3, z3]):
        results = []
        for stand_in in (True, False):
            z = z.detach().requires_grad_(grad)
            with triton_stand_in() if stand_in else contextlib.nullcontext():
                with torch.set_grad_enabled(grad):
                    h, c = cell(z)
                h.mul_(w)
                if not grad:  # (the Triton route saves c for its backward: autograd guards it)
                    c.add_(w)
                wrt = (z, w) if grad else (w,)
                results.append([h, c, *torch.autograd.grad(h.sum() + c.sum(), wrt)])
        for a, b in zip(*results):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
