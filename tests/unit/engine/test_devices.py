"""Every tensor the engine and the eager oracle make follows the model's device.

On any machine: each case of ``device_cases`` (one per block family and per model) with its
parameters on the ``meta`` device, no dispatched op but a copy (the upload of an input's
values) may mix a CPU tensor with a device one, and every result is on ``meta`` — a tensor
made on the CPU and handed to the model (an index, a constant, a buffer) fails the check, as it
fails on CUDA. Where a GPU is present (``gpu``): batched == eager on CUDA, values and gradients,
and CUDA == CPU for the same weights.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from device_cases import (
    CASES,
    NEEDS_VALUES,
)  # beside this file (pytest puts its folder on the path)
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

import foldexp.blocks as fb
from foldexp import Compiler
from foldexp.bench.overhead import cuda_route
from foldexp.executor.calls import on_device
from foldexp.testing import check_block, check_devices_agree


class _Devices(TorchDispatchMode):
    """Records, per op, the devices of the tensors it reads and writes."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, set[str]]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        flat, _ = tree_flatten((args, kwargs, out))
        devices = {str(t.device) for t in flat if isinstance(t, torch.Tensor)}
        self.seen.append((str(func), devices))
        return out


_COPIES = ("aten._to_copy.default", "aten.copy_.default")


def _off_device(mode: _Devices, device: str) -> list[tuple[str, set[str]]]:
    """The ops that mixed tensors of two devices, uploads (copies to ``device``) aside."""
    return [(op, d) for op, d in mode.seen if len(d) > 1 and op not in _COPIES]


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_eager_oracle_makes_its_tensors_where_the_parameters_are(name: str) -> None:
    if name in NEEDS_VALUES:
        pytest.skip("its control flow reads values, which meta tensors have not")
    block, inputs = CASES[name]()
    comp = Compiler(block).to("meta")
    with _Devices() as mode:
        outs = [comp.root.eval(x) for x in inputs]
    assert all(t.device.type == "meta" for t in tree_flatten(outs)[0])
    assert mode.seen and not _off_device(mode, "meta"), _off_device(mode, "meta")[:5]


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_batched_engine_makes_its_tensors_where_the_parameters_are(name: str) -> None:
    if name in NEEDS_VALUES:
        pytest.skip("its control flow reads values, which meta tensors have not")
    block, inputs = CASES[name]()
    comp = Compiler(block).to("meta")
    plan = comp.build(inputs)  # traced and scheduled on the CPU, device-free
    with _Devices() as mode:
        out = comp.run(plan)
    assert all(t.device.type == "meta" for t in tree_flatten(out)[0])
    assert mode.seen and not _off_device(mode, "meta"), _off_device(mode, "meta")[:5]


def test_a_model_without_parameters_runs_on_the_device_it_is_given() -> None:
    block = fb.Map(fb.Vector(2)) >> fb.Sum()
    assert Compiler(block).device == torch.device("cpu")
    comp = Compiler(block, device="meta")
    assert comp.device.type == "meta" and comp([[[1.0, 2.0]]]).device.type == "meta"
    assert Compiler(block).to("meta").device.type == "meta"
    assert "_device_anchor" not in comp.state_dict()  # checkpoints are unchanged
    with _Devices() as mode:
        assert block.eval([[1.0, 2.0]], device="meta").device.type == "meta"
    assert mode.seen and not _off_device(mode, "meta")


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(CASES))
def test_batched_equals_eager_on_cuda(name: str) -> None:
    block, inputs = CASES[name]()
    comp = check_block(block, inputs, device="cuda")
    assert comp.device.type == "cuda"


@pytest.mark.parametrize("name", sorted(CASES))
def test_batched_equals_eager_on_cudas_route(name: str) -> None:
    # On the CPU, the route a CUDA run takes: foldexp's CPU-only kernels off, weight gradients
    # multiplied as on a GPU; ``check_block`` runs both the per-group route and the tape.
    block, inputs = CASES[name]()
    with cuda_route():
        check_block(block, inputs)


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(CASES))
def test_cuda_agrees_with_the_cpu(name: str) -> None:
    block, inputs = CASES[name]()
    check_devices_agree(block, inputs, "cuda", rtol=1e-4, atol=1e-5)


@pytest.mark.gpu
# torch calls the sync debug mode a prototype, in a warning that the suite's filter makes an error
@pytest.mark.filterwarnings("ignore:Synchronization debug mode is a prototype:UserWarning")
def test_the_cuda_engine_step_makes_no_host_sync() -> None:
    """Between the plan's upload and the loss, no op waits for the GPU (``.item()``, a
    device-to-host copy); torch raises on one under ``set_sync_debug_mode("error")``."""
    block, inputs = CASES["tree_lstm"]()
    comp = Compiler(block).to("cuda")
    plan = comp.build(inputs)
    comp.run(plan)  # the first run uploads the plan and warms the allocator
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        loss = comp.run(plan).square().sum()
        loss.backward()
    finally:
        torch.cuda.set_sync_debug_mode("default")


def test_a_plan_goes_to_the_device_in_one_copy_and_once() -> None:
    block, inputs = CASES["tree_lstm"]()
    comp = Compiler(block).to("meta")
    plan = comp.build(inputs)
    indices = sum(isinstance(ga.rows, torch.Tensor) for g in plan.groups for ga in g.gathers) + sum(
        isinstance(r, torch.Tensor) for _, r in plan.outputs
    )
    assert indices > 5  # the case has many gathers to move
    with _Devices() as mode:
        moved = on_device(plan, torch.device("meta"))
    copies = [op for op, devices in mode.seen if op in _COPIES and "meta" in devices]
    assert len(copies) == 1, copies
    assert all(
        ga.rows.device.type == "meta"
        for g in moved.groups
        for ga in g.gathers
        if isinstance(ga.rows, torch.Tensor)
    )
    with _Devices() as mode:
        assert on_device(plan, torch.device("meta")) is moved  # a plan run again uploads nothing
    assert not mode.seen
