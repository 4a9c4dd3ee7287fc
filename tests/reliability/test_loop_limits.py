"""Loops refuse at composition what they cannot run (issue 52, row 7 and a Low row).

Before: ``fb.Unfold`` whose step holds a dropout trained until "lengths did not settle in 256
stages" (the length probe and the unrolled steps drew different noise), and
``fb.While(max_iterations=10**30)`` was accepted, to fail inside a batch. Now the first is a
``TypeError`` naming the Unfold and the step when the model is composed, and the second a
``ValueError`` naming the bound.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import foldexp.blocks as fb
from foldexp import Compiler
from foldexp.blocks._loop_ops import MAX_LOOP_LIMIT


class _Step(torch.nn.Module):
    def __init__(self, p: float) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.drop = torch.nn.Dropout(p)

    def forward(self, h: torch.Tensor, b: torch.Tensor) -> tuple:
        h2 = torch.tanh(self.drop(self.lin(h)))
        return (h2, b - 1.0), h2.sum(-1), b <= 1.0


def _plain(h: torch.Tensor, b: torch.Tensor) -> tuple:
    return (h, b - 1.0), h.sum(-1), b <= 1.0


def _compose(step: fb.Block) -> Compiler:
    """The model as a user composes it: types are checked when it is compiled."""
    return Compiler(fb.Record([fb.Vector(4), fb.Scalar()]) >> fb.Unfold(step, 6) >> fb.Sum())


@pytest.mark.parametrize(
    "step",
    [
        lambda: fb.Function(_Step(0.5)),
        lambda: fb.Function(_plain, random=True),
    ],
    ids=["dropout", "declared-random"],
)
def test_unfold_with_randomness_in_its_step_is_refused_when_composed(
    step: Callable[[], fb.Block],
) -> None:
    with pytest.raises(TypeError, match=r"Unfold\(.*draws random numbers"):
        _compose(step())


def test_unfold_without_randomness_composes() -> None:
    _compose(fb.Function(_Step(0.0)))
    _compose(fb.Function(_plain))


@pytest.mark.parametrize("limit", [10**30, MAX_LOOP_LIMIT + 1])
def test_while_with_an_absurd_bound_is_refused_naming_it(limit: int) -> None:
    with pytest.raises(ValueError, match=rf"max_iterations must be .* at most {MAX_LOOP_LIMIT}"):
        fb.While(fb.Function(lambda x: x.sum() > 0), fb.Function(lambda x: x - 1), limit)
