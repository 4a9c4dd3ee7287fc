"""Fixtures for the block tests: ``check_metrics``, the oracle for ``Metric`` outputs."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
import torch

from foldexp import Compiler
from foldexp.blocks._base import skipped_cases
from foldexp.blocks._eager import eval_with_metrics


def _check_metrics(
    block: Any, inputs: Sequence[Any], names: Sequence[str], atol: float = 1e-5
) -> Compiler:
    """Asserts batched == eager for each metric: values, input indices and gradients."""
    comp = Compiler(block)
    params = [p for p in comp.parameters() if p.requires_grad]
    eager = [eval_with_metrics(comp.root, x)[1] for x in inputs]
    comp(list(inputs))
    gen = torch.Generator().manual_seed(0)
    batched_loss: Any = 0.0
    eager_loss: Any = 0.0
    for name in names:
        values, index = comp.last_metrics[name]
        want = [(k, v) for k, m in enumerate(eager) for v in m.get(name, [])]
        assert values.shape[0] == len(want), f"{name}: {values.shape[0]} values, want {len(want)}"
        assert index.tolist() == [k for k, _ in want], f"{name}: input indices differ"
        for row, (_, v) in zip(values, want):
            torch.testing.assert_close(row.double(), v.double(), rtol=1e-5, atol=atol)
        if values.dtype.is_floating_point:
            w = torch.randn(values.shape, generator=gen, dtype=torch.float64)
            batched_loss = batched_loss + (values.double() * w).sum()
            eager_loss = eager_loss + sum(
                (v.double() * w[i]).sum() for i, (_, v) in enumerate(want)
            )
    if params and isinstance(batched_loss, torch.Tensor) and batched_loss.requires_grad:
        gb = torch.autograd.grad(batched_loss, params, allow_unused=True)
        ge = torch.autograd.grad(eager_loss, params, allow_unused=True)
        for p, a, b in zip(params, gb, ge):
            a = torch.zeros_like(p) if a is None else a
            b = torch.zeros_like(p) if b is None else b
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-4)
    return comp


@pytest.fixture
def check_metrics() -> Callable[..., Compiler]:
    """``check_metrics(block, inputs, names)``: batched metrics == eager, with gradients."""
    return _check_metrics


@pytest.fixture(autouse=True)
def _no_provisional_types_left() -> Iterator[None]:
    """Type inference must settle every recursive case it skips, even when it fails."""
    yield
    assert skipped_cases() == 0, "a skipped recursive case was left unsettled"
