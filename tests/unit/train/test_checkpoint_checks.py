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


@pytest.mark.parametrize(
    ("make", "key"),
    [
        (lambda ps: torch.optim.Adam(ps, lr=0.1), "lr"),
        (lambda ps: torch.optim.Adam(ps, lr=0.1), "betas"),
        (lambda ps: torch.optim.Adagrad(ps, lr=0.1), "lr_decay"),
        (lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9), "momentum"),
    ],
    ids=["adam-lr", "adam-betas", "adagrad-lr_decay", "sgd-momentum"],
)
def test_an_optimizer_group_without_a_setting_is_refused(make, key: str) -> None:
    """torch puts the saved group in place of ours: a setting left out of it would be a
    KeyError traceback at the first step after the resume, not a line naming it."""
    from foldexp.train.optimizer_checks import check_optimizer

    param = torch.nn.Parameter(torch.ones(3))
    optimizer = make([param])
    param.grad = torch.ones(3)
    optimizer.step()
    saved = optimizer.state_dict()
    check_optimizer(PATH, "optimizer", saved, optimizer)  # as written: accepted
    del saved["param_groups"][0][key]
    with pytest.raises(CorruptFileError, match=rf"optimizer\.param_groups\[0\]\.{key} is missing"):
        check_optimizer(PATH, "optimizer", saved, optimizer)


@pytest.mark.parametrize("size", [0, 5, 17, 4096])
def test_a_cuda_generator_state_of_the_wrong_size_is_refused(size: int) -> None:
    """torch's CUDA generator refuses a state that is not its 16 bytes (or 8) with a
    RuntimeError, which a resume on a GPU met as a traceback after the weights were loaded."""
    rng = rng_state()
    check_rng(PATH, {**rng, "cuda": [torch.zeros(16, dtype=torch.uint8)]})  # a real one's size
    with pytest.raises(CorruptFileError, match=rf"rng\.cuda\[1\] holds {size} bytes"):
        good, bad = torch.zeros(16, dtype=torch.uint8), torch.zeros(size, dtype=torch.uint8)
        check_rng(PATH, {**rng, "cuda": [good, bad]})


@pytest.mark.parametrize(
    "step", [torch.tensor(True), torch.tensor([1.0, 2.0]), torch.tensor(-1.0), torch.tensor(1j)]
)
def test_an_adam_step_that_is_not_a_count_is_refused(step: torch.Tensor) -> None:
    """A 0-d bool ``step`` passed, then failed Adam's ``step += 1`` with a traceback."""
    from foldexp.train.optimizer_checks import check_optimizer

    param = torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.Adam([param], lr=0.1)
    param.grad = torch.ones(3)
    optimizer.step()
    saved = optimizer.state_dict()
    saved["state"][0]["step"] = step
    with pytest.raises(CorruptFileError, match=r"optimizer\.state\[0\]\.step is not a count"):
        check_optimizer(PATH, "optimizer", saved, optimizer)
