"""``checkpoint_checks``: which tensors count as plain, and positions a real run reaches."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from foldexp.train.artifacts import CorruptFileError
from foldexp.train.checkpoint import rng_state
from foldexp.train.checkpoint_checks import (
    ProgressLimits,
    check_progress,
    check_rng,
    check_tensors,
)
from foldexp.train.fit import new_progress

PATH = Path("last.pt")


@pytest.mark.parametrize(
    "tensor",
    [
        torch.zeros(3, 4),
        torch.zeros(4, 3).t(),
        torch.zeros(()),
        torch.zeros(0, 5),
        torch.zeros(1, 7),
    ],
    ids=["contiguous", "transposed", "scalar", "empty", "unit-dim"],
)
def test_plain_tensors_pass(tensor: torch.Tensor) -> None:
    check_tensors(PATH, {"model": {"w": tensor}, "optimizer": {"state": {0: {"m": tensor}}}})


@pytest.mark.parametrize(
    ("tensor", "says"),
    [
        (torch.zeros(1).expand(1000, 1000), "stride 0"),
        (torch.zeros(10, 10)[:, :5], "stride 10"),  # every other half-row: gaps
        (torch.zeros(100)[50:], "offset 50"),
        (torch.zeros(100)[:10], "storage of 400 bytes"),
    ],
    ids=["expanded", "gaps", "offset", "larger-storage"],
)
def test_views_are_refused_naming_the_tensor(tensor: torch.Tensor, says: str) -> None:
    with pytest.raises(CorruptFileError, match=rf"last\.pt: optimizer\.state\[0\]\.m .*{says}"):
        check_tensors(PATH, {"optimizer": {"state": {0: {"m": tensor}}}})


def test_a_fresh_position_and_the_states_of_this_process_pass() -> None:
    check_progress(PATH, new_progress(), ProgressLimits.of(1, 10, 4))
    check_rng(PATH, rng_state())


def test_limits_count_batches_as_the_sampler_does() -> None:
    assert ProgressLimits.of(3, 10, 4) == ProgressLimits(3, 3)
    assert ProgressLimits.of(3, 10, 4, limit=2) == ProgressLimits(3, 2)
