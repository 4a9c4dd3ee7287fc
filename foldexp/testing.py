"""The oracle check every block and model test goes through (and users can reuse).

``check_block`` asserts, on one mixed batch of inputs:

1. the expected values (if given) == ``block.eval(x)`` for each input, one at a time, eagerly;
2. the expected depth (if given) == ``block.max_depth(x)``;
3. eager == the batched ``Compiler`` output, row for row;
4. the gradients of a random scalar loss with respect to every parameter (and the loss itself)
   are equal between the eager and the batched runs, the batched run taken both per group
   (``device.compile=off``) and on the tape (``graphs``: ``foldexp/executor/tape.py``).

``check_block(..., device="cuda")`` does all of it with the model and every tensor the engine
and the oracle make on that device; ``check_devices_agree`` compares two devices' batched runs.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from foldexp.blocks._base import Block, convert_to_block
from foldexp.executor import Compiler, compiling
from foldexp.types import Type

__all__ = ["check_block", "check_devices_agree", "assert_compilers_agree", "flatten_tensors"]


def flatten_tensors(value: Any) -> list[torch.Tensor]:
    """The tensors inside a (nested) tuple/list value, left to right."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in flatten_tensors(v)]
    return []


def _close(a: torch.Tensor, b: torch.Tensor, rtol: float, atol: float, what: str) -> None:
    a, b = torch.as_tensor(a).cpu(), torch.as_tensor(b).cpu()
    assert a.shape == b.shape, f"{what}: shape {tuple(a.shape)} != {tuple(b.shape)}"
    if a.dtype.is_floating_point or b.dtype.is_floating_point:
        torch.testing.assert_close(a.double(), b.double(), rtol=rtol, atol=atol, msg=what)
    else:
        assert torch.equal(a, b), f"{what}: {a} != {b}"


def check_block(
    block: Any,
    inputs: Sequence[Any],
    expected: Sequence[Any] | None = None,
    expected_depth: int | Sequence[int] | None = None,
    input_type: Type | None = None,
    rtol: float = 1e-5,
    atol: float = 1e-5,
    check_grads: bool = True,
    seed: int = 0,
    device: torch.device | str | None = None,
    sinks_last: bool | None = None,
) -> Compiler:
    """Asserts expected == eager == batched, values and gradients; returns the compiler. With
    ``device``, the model (and so both runs) is on that device; the CPU by default.
    ``sinks_last`` is the compiler's (``Compiler``)."""
    block = convert_to_block(block)
    compiler = Compiler(block, input_type, device=device, sinks_last=sinks_last)
    if device is not None:
        compiler.to(device)
    root: Block = compiler.root
    params = [p for p in compiler.parameters() if p.requires_grad]
    where = compiler.device

    eager = [root.eval(x, device=where) for x in inputs]
    if expected is not None:
        _check_expected(eager, expected, len(inputs), rtol, atol)
    if expected_depth is not None:
        _check_depths(root, inputs, expected_depth)
    batched = _check_batched(compiler, inputs, eager, rtol, atol)
    if check_grads and params and any(o.dtype.is_floating_point for o in batched):
        _check_gradients(compiler, inputs, batched, params, seed, (rtol, atol))
    return compiler


def _check_expected(
    eager: list[Any], expected: Sequence[Any], n: int, rtol: float, atol: float
) -> None:
    """``check_block``'s first step: each input's eager value is the one ``expected``."""
    assert len(expected) == n
    for k, (want, got) in enumerate(zip(expected, eager)):
        wants, gots = flatten_tensors(_as_tensors(want)), flatten_tensors(got)
        assert len(wants) == len(gots), f"input {k}: expected {want!r}, got {got!r}"
        for w, g in zip(wants, gots):
            _close(g, w, rtol, atol, f"input {k}: eager value vs expected")


def _check_depths(root: Block, inputs: Sequence[Any], expected_depth: int | Sequence[int]) -> None:
    """Each input's depth through ``root`` is the one expected (one for all, or one each)."""
    depths = (
        [expected_depth] * len(inputs) if isinstance(expected_depth, int) else list(expected_depth)
    )
    for k, (x, want) in enumerate(zip(inputs, depths)):
        got = root.max_depth(x)
        assert got == want, f"input {k}: depth {got}, expected {want}"


def _check_batched(
    compiler: Compiler, inputs: Sequence[Any], eager: list[Any], rtol: float, atol: float
) -> list[torch.Tensor]:
    """The batched run's outputs, on the model's device, one row per input equal to that
    input's eager value; returns them."""
    where = compiler.device
    batched = flatten_tensors(compiler(list(inputs)))
    for c, out in enumerate(batched):
        assert out.device == where, f"output {c} on {out.device}, the model on {where}"
    eager_rows = [flatten_tensors(e) for e in eager]
    for c, out in enumerate(batched):
        assert out.shape[0] == len(inputs), f"output {c}: {out.shape[0]} rows for {len(inputs)}"
        for k in range(len(inputs)):
            _close(out[k], eager_rows[k][c], rtol, atol, f"output {c}, input {k}: batched vs eager")
    return batched


def _check_gradients(
    compiler: Compiler,
    inputs: Sequence[Any],
    batched: list[torch.Tensor],
    params: list[torch.Tensor],
    seed: int,
    tolerance: tuple[float, float],
) -> None:
    """The gradients of a random weighting of the outputs (``seed``) are the same batched as
    summed over the inputs run eagerly one by one."""
    rtol, atol = tolerance
    root: Block = compiler.root
    where = compiler.device
    gen = torch.Generator().manual_seed(seed)
    weights = [
        torch.randn(o.shape, generator=gen, dtype=torch.float64).to(where)
        if o.dtype.is_floating_point
        else None
        for o in batched
    ]

    def loss_of(outs: list[torch.Tensor]) -> torch.Tensor:
        return sum((o.double() * w).sum() for o, w in zip(outs, weights) if w is not None)

    routes = []  # the per-group route and the tape, each against the eager run
    for mode in ("off", "graphs"):
        with compiling(mode):
            compiler.zero_grad()
            loss = loss_of(flatten_tensors(compiler(list(inputs))))
            routes.append((mode, loss, torch.autograd.grad(loss, params, allow_unused=True)))
    per_input = []
    for k, x in enumerate(inputs):
        outs = flatten_tensors(root.eval(x, device=where))
        per_input.append(
            sum((o.double() * w[k]).sum() for o, w in zip(outs, weights) if w is not None)
        )
    eager_loss = sum(per_input)
    eager_grads = torch.autograd.grad(eager_loss, params, allow_unused=True)
    for mode, batched_loss, batched_grads in routes:
        what = f"batched (device.compile={mode}) vs eager"
        _close(batched_loss.detach(), eager_loss.detach(), rtol, atol, f"loss: {what}")
        for i, (gb, ge) in enumerate(zip(batched_grads, eager_grads)):
            gb = torch.zeros_like(params[i]) if gb is None else gb
            ge = torch.zeros_like(params[i]) if ge is None else ge
            shape = tuple(params[i].shape)
            _close(gb, ge, rtol, max(atol, 1e-4), f"gradient of parameter {i} {shape}: {what}")


def check_devices_agree(
    block: Any,
    inputs: Sequence[Any],
    device: torch.device | str,
    input_type: Type | None = None,
    rtol: float = 1e-5,
    atol: float = 1e-5,
    seed: int = 0,
) -> None:
    """The batched run on ``device`` equals the same weights' batched run on the CPU: outputs
    and the gradients of a random scalar loss, to float tolerance."""
    torch.manual_seed(seed)
    cpu = Compiler(convert_to_block(block), input_type)
    other = copy.deepcopy(cpu).to(device)
    gen = torch.Generator().manual_seed(seed)
    results = []
    for comp in (cpu, other):
        outs = flatten_tensors(comp(list(inputs)))
        if not results:
            weights = [torch.randn(o.shape, generator=gen, dtype=torch.float64) for o in outs]
        floats = [
            (o.double() * w.to(o.device)).sum()
            for o, w in zip(outs, weights)
            if o.dtype.is_floating_point
        ]
        params = [p for p in comp.parameters() if p.requires_grad]
        grads: tuple[torch.Tensor | None, ...] = ()
        if params and floats and any(f.requires_grad for f in floats):
            grads = torch.autograd.grad(sum(floats), params, allow_unused=True)
        results.append((outs, grads))
    (outs_a, grads_a), (outs_b, grads_b) = results
    assert len(outs_a) == len(outs_b) and len(grads_a) == len(grads_b)
    for c, (a, b) in enumerate(zip(outs_a, outs_b)):
        assert b.device.type == torch.device(device).type, f"output {c} on {b.device}"
        _close(b, a, rtol, atol, f"output {c}: {device} vs cpu")
    for i, (a, b) in enumerate(zip(grads_a, grads_b)):
        if a is None or b is None:
            assert a is None and b is None, f"gradient {i}: reached on one device only"
            continue
        _close(b, a, rtol, max(atol, 1e-4), f"gradient of parameter {i}: {device} vs cpu")


def assert_compilers_agree(first: Compiler, second: Compiler, inputs: Sequence[Any]) -> None:
    """Two compilers of the same block (other options: caching, fusion, order) give the same
    outputs and the same parameter gradients of a sum-of-squares loss on ``inputs``."""
    a, b = first(list(inputs)), second(list(inputs))
    torch.testing.assert_close(a, b)
    ga = torch.autograd.grad(a.square().sum(), list(first.parameters()))
    gb = torch.autograd.grad(b.square().sum(), list(second.parameters()))
    assert len(ga) == len(gb)
    for x, y in zip(ga, gb):
        torch.testing.assert_close(x, y)


def _as_tensors(value: Any) -> Any:
    """Expected values: a tuple is a tuple output; anything else (numbers, lists, arrays) one
    tensor."""
    if isinstance(value, tuple):
        return tuple(_as_tensors(v) for v in value)
    if isinstance(value, torch.Tensor):
        return value
    return torch.as_tensor(np.asarray(value))
