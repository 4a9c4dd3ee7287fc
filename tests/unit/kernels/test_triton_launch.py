"""``triton_launch.launch``: Triton's own call for a specialization not seen yet, the compiled
kernel's launcher directly after, and Triton's call again wherever the direct one may not
serve. A fake kernel stands in for Triton's here (its compiled launch needs a GPU); the gpu test
checks the real one's results against Triton's call."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest
import torch

from foldexp.kernels import triton_launch


class _OnCuda(torch.Tensor):
    """A CPU tensor that says it lives on ``cuda:0``."""

    is_cuda = property(lambda self: True)
    device = property(lambda self: torch.device("cuda", 0))


class _Compiled:
    packed_metadata = (4, 1, 0)
    function = 1234

    def __init__(self) -> None:
        self.runs: list[tuple] = []

    def run(self, *args: Any) -> None:
        self.runs.append(args)


class _Kernel:
    """Triton's ``JITFunction`` as ``launch`` sees it: parameter names, and ``[grid](...)``
    that compiles (a new ``_Compiled`` a call, counted) and launches."""

    arg_names = ["x", "y", "n", "HAS_Y", "BLOCK"]

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def __getitem__(self, grid: tuple) -> Any:
        def call(*args: Any, **flags: Any) -> _Compiled:
            self.calls.append((grid, args, flags))
            return _Compiled()

        return call


@pytest.fixture
def fake_triton(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """Direct launches recorded as ``(compiled, grid, args)`` instead of run; the cache and the
    switch restored after."""
    direct: list[tuple] = []
    monkeypatch.setattr(triton_launch, "_compiled", {})
    monkeypatch.setattr(triton_launch, "_enabled", True)
    monkeypatch.setattr(triton_launch, "_direct_ready", lambda: True)
    monkeypatch.setattr(triton_launch, "_run", lambda c, g, a, d: direct.append((c, g, a)))
    return direct


def _x(n: int = 8, offset: int = 0) -> torch.Tensor:
    return torch.zeros(n + offset)[offset:].as_subclass(_OnCuda)


def test_a_kept_specialization_launches_directly_with_every_parameter_in_order(
    fake_triton: list[tuple],
) -> None:
    kernel, x, y = _Kernel(), _x(), _x()
    triton_launch.launch(kernel, (3,), x, y, 40, HAS_Y=True, BLOCK=512)
    assert len(kernel.calls) == 1 and not fake_triton  # compiled by Triton's call
    triton_launch.launch(kernel, (5,), x, y, 40, BLOCK=512, HAS_Y=True)
    assert len(kernel.calls) == 1
    (compiled, grid, args), = fake_triton  # fmt: skip
    assert grid == (5,) and args == [x, y, 40, True, 512]  # the flags in the kernel's order
    assert compiled in triton_launch._compiled.values()


@pytest.mark.parametrize(
    "change",
    ["misaligned pointer", "int is 1", "16 divides the int", "wide int", "flag", "dtype"],
)
def test_another_specialization_goes_through_tritons_call(
    fake_triton: list[tuple], change: str
) -> None:
    kernel = _Kernel()
    base = dict(x=_x(), y=_x(), n=40, HAS_Y=True)
    triton_launch.launch(kernel, (1,), base["x"], base["y"], base["n"], HAS_Y=True, BLOCK=512)
    other = dict(base)
    if change == "misaligned pointer":
        other["y"] = _x(offset=1)  # 4 bytes into its storage
    elif change == "int is 1":
        other["n"] = 1
    elif change == "16 divides the int":
        other["n"] = 48
    elif change == "wide int":
        other["n"] = 2**31 + 8
    elif change == "flag":
        other["HAS_Y"] = False
    else:
        other["x"] = torch.zeros(8, dtype=torch.float64).as_subclass(_OnCuda)
    triton_launch.launch(kernel, (1,), other["x"], other["y"], other["n"],
                         HAS_Y=other["HAS_Y"], BLOCK=512)  # fmt: skip
    assert len(kernel.calls) == 2 and not fake_triton


def test_tritons_call_serves_without_a_gpu_a_switch_or_a_ready_launcher(
    fake_triton: list[tuple], monkeypatch: pytest.MonkeyPatch
) -> None:
    kernel = _Kernel()
    cpu = torch.zeros(8)
    for _ in range(2):
        triton_launch.launch(kernel, (1,), cpu, cpu, 40, HAS_Y=True, BLOCK=512)
    assert len(kernel.calls) == 2 and not triton_launch._compiled  # Triton's interpreter
    x = _x()
    triton_launch.launch(kernel, (1,), x, x, 40, HAS_Y=True, BLOCK=512)
    monkeypatch.setattr(triton_launch, "_direct_ready", lambda: False)  # a hook, say
    triton_launch.launch(kernel, (1,), x, x, 40, HAS_Y=True, BLOCK=512)
    triton_launch.set_direct_launch_enabled(False)
    monkeypatch.setattr(triton_launch, "_direct_ready", lambda: True)
    triton_launch.launch(kernel, (1,), x, x, 40, HAS_Y=True, BLOCK=512)
    assert len(kernel.calls) == 5 and not fake_triton


def test_a_launcher_of_another_shape_turns_direct_launches_off(
    fake_triton: list[tuple], monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*_: Any) -> None:
        raise TypeError("function takes exactly 14 arguments (17 given)")

    monkeypatch.setattr(triton_launch, "_run", refuse)
    kernel, x = _Kernel(), _x()
    for _ in range(3):
        triton_launch.launch(kernel, (1,), x, x, 40, HAS_Y=True, BLOCK=512)
    assert len(kernel.calls) == 3  # every launch happened, through Triton's call
    assert not triton_launch.direct_launch_enabled()


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton is not installed")
def test_the_launcher_shape_is_checked_against_this_tritons_version() -> None:
    import triton

    known = triton.__version__.startswith(triton_launch._KNOWN_LAUNCHERS)
    assert triton_launch._direct_ready() == known  # no launch hook is set here


@pytest.mark.gpu
def test_direct_launches_equal_tritons_calls_on_cuda() -> None:
    from foldexp.kernels.treelstm_triton import binary_backward, binary_forward

    g = torch.Generator("cuda").manual_seed(0)
    z = torch.randn(37, 5 * 24, generator=g, device="cuda") * 3
    cl, cr, dh, dc = (torch.randn(37, 24, generator=g, device="cuda") for _ in range(4))
    results = []
    for direct in (False, True, True):  # Triton's call; then compiled, then kept
        triton_launch.set_direct_launch_enabled(direct)
        try:
            h, c = binary_forward(z, cl, cr, None)
            results.append((h.clone(), c.clone(), *binary_backward(z, cl, cr, None, c, dh, dc)))
        finally:
            triton_launch.set_direct_launch_enabled(True)
    assert any(key[0] is not None for key in triton_launch._compiled)  # a kept kernel served
    for later in results[1:]:
        for a, b in zip(results[0], later):
            assert torch.equal(a, b)
