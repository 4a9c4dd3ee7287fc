"""``floor_step``: the peers' step as the fewest calls, backward by hand, must compute what the
engine computes (the loss and every parameter's gradient), with the CPU's C++ update kernels,
CUDA's Triton ones in Triton's interpreter, and on a GPU."""

from __future__ import annotations

import importlib.util
import runpy
import sys
from pathlib import Path

import pytest
import torch

from foldexp.bench import floor
from foldexp.bench.overhead import peers_step
from foldexp.kernels.native import load_kernels


def largest_difference(device: str = "cpu", trees: int = 12, leaves: int = 9) -> float:
    """The largest difference between the engine's and the floor's loss and gradients."""
    engine = peers_step("engine", trees=trees, leaves=leaves, hidden=6, device=device)
    loss = engine()
    m = engine.module  # type: ignore[attr-defined]
    want = {name: p.grad.clone() for name, p in m.named_parameters()}
    cells = dict(zip(engine.__code__.co_freevars, (c.cell_contents for c in engine.__closure__)))
    step = floor.floor_step(m, cells["batch"], cells["labels"])
    assert step is not None
    m.zero_grad(set_to_none=True)
    worst = (step() - loss).abs().item()
    for name, p in m.named_parameters():
        worst = max(worst, (p.grad - want[name]).abs().max().item())
    return worst


@pytest.mark.skipif(load_kernels() is None, reason="foldexp's C++ kernels are not built")
def test_the_floor_computes_the_engines_loss_and_gradients() -> None:
    assert largest_difference() < 1e-5


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton is not installed")
def test_the_floor_with_tritons_kernels_in_the_interpreter(in_triton_interpreter) -> None:  # noqa: ANN001
    out = in_triton_interpreter(
        Path(__file__).parent,
        "import test_floor; from foldexp.bench import floor;"
        " floor._updates = lambda device: floor._TritonUpdates();"
        " print(test_floor.largest_difference())",
    )
    assert float(out.split()[-1]) < 1e-5


@pytest.mark.gpu
def test_the_floor_on_cuda() -> None:
    assert largest_difference("cuda", trees=64, leaves=33) < 1e-5


def test_no_floor_where_no_update_kernel_serves() -> None:
    engine = peers_step("engine", trees=2, leaves=3, hidden=4)
    labels = torch.zeros(1, dtype=torch.long)
    m = engine.module.double()  # type: ignore[attr-defined]
    assert floor.floor_step(m, [((1,), (2,))], labels) is None  # float32 kernels only
    assert floor.floor_step(m.float().to("meta"), [((1,), (2,))], labels) is None


def test_step_overhead_runs_without_a_floor(monkeypatch, capsys) -> None:  # noqa: ANN001
    """Where no update kernel serves (no C++ compiler; CUDA without Triton) the benchmark still
    measures the engine and the level batching, and says the floor is missing."""
    monkeypatch.setattr(floor, "_updates", lambda device: None)
    argv = ["step_overhead.py", "--trees", "2", "--leaves", "3", "--hidden", "4"]
    monkeypatch.setattr(sys, "argv", [*argv, "--small-hidden", "4", "--repeats", "1"])
    root = Path(__file__).resolve().parents[3]
    runpy.run_path(str(root / "benchmarks" / "step_overhead.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "level / engine, off" in out and "level / engine, tape" in out
    assert "floor: none (no update kernel serves cpu)" in out
