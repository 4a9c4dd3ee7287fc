"""``trainer.lr_schedule``: warm-up and linear or cosine decay of every group's learning rate,
computed from the step's number so that a resumed run takes the uninterrupted run's rates."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
import torch

from foldexp.config.errors import ConfigError
from foldexp.train.app import compose_config
from foldexp.train.checkpoint import read_checkpoint
from foldexp.train.loop import run_train
from foldexp.train.lr_schedule import LRScheduler, lr_factor, planned_steps
from foldexp.train.optim import build_optimizer


def test_warmup_rises_to_one_then_each_shape_decays_to_its_floor() -> None:
    assert [lr_factor(s, 10, "constant", warmup=4) for s in range(6)] == [
        0.25, 0.5, 0.75, 1.0, 1.0, 1.0,
    ]  # fmt: skip
    linear = [lr_factor(s, 10, "linear", warmup=2, min_ratio=0.1) for s in range(10)]
    assert linear[:3] == [0.5, 1.0, 1.0] and linear[-1] == pytest.approx(0.1)
    assert all(a > b for a, b in zip(linear[2:], linear[3:]))  # falls at every step
    assert linear[6] == pytest.approx(0.1 + 0.9 * (1 - 4 / 7))
    cosine = [lr_factor(s, 11, "cosine") for s in range(11)]
    assert cosine[0] == 1.0 and cosine[5] == pytest.approx(0.5) and cosine[10] == pytest.approx(0)
    assert cosine[2] == pytest.approx(0.5 * (1 + math.cos(math.pi * 0.2)))
    assert lr_factor(50, 11, "cosine", min_ratio=0.2) == pytest.approx(0.2)  # past the end: floor


def test_planned_steps_follow_the_sampler_and_the_limits() -> None:
    assert planned_steps(100, 32, 3) == 12  # 4 batches an epoch, the last one short
    assert planned_steps(100, 32, 3, limit_batches=2) == 6
    assert planned_steps(100, 32, 3, max_steps=5) == 5
    assert planned_steps(100, 32, 3, max_steps=50) == 12


def test_each_group_keeps_its_own_base_rate() -> None:
    w, e = torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(3))
    groups = [{"params": [w], "lr": 0.1}, {"params": [e], "lr": 0.5, "optimizer": "sgd"}]
    optimizer = build_optimizer(lambda g: torch.optim.Adagrad(g, lr=0.1), groups)
    schedule = LRScheduler("linear", warmup=0, min_ratio=0.0, total=5)
    for step, factor in enumerate([1.0, 0.75, 0.5, 0.25, 0.0]):
        assert schedule.set_for(optimizer, step) == pytest.approx(factor)
        rates = [g["lr"] for g in optimizer.param_groups]
        assert rates == pytest.approx([0.1 * factor, 0.5 * factor])


@pytest.mark.parametrize(
    "override, expected",
    [
        ("trainer.lr_min_ratio=1.5", "trainer.lr_min_ratio=1.5; expected 0 <= value <= 1"),
        ("trainer.lr_min_ratio=nan", "trainer.lr_min_ratio=nan; expected 0 <= value <= 1"),
        (
            "trainer.lr_warmup_steps=-1",
            "trainer.lr_warmup_steps=-1; expected 0 <= value <= 1000000000",
        ),
    ],
)
def test_bad_values_fail_at_compose_time(override: str, expected: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        compose_config([override], tmp_path)
    assert str(err.value) == expected


def test_an_unknown_shape_names_the_shapes(capsys: pytest.CaptureFixture[str]) -> None:
    from foldexp.cli import main

    assert main(["train", "trainer.lr_schedule=exponential"]) == 2
    first = capsys.readouterr().err.splitlines()[0]
    assert "'exponential', expected one of [constant, linear, cosine]" in first


def test_a_warmup_as_long_as_the_run_fails_before_the_model_is_built(tiny, tmp_path: Path) -> None:
    cfg = compose_config([*tiny, "trainer.epochs=1", "trainer.lr_warmup_steps=15"], tmp_path)
    with pytest.raises(ConfigError, match=r"lr_warmup_steps=15; expected fewer than the run's 15 "):
        run_train(cfg)  # 240 training examples in batches of 16
    assert not (tmp_path / "checkpoints").exists()


def test_the_last_step_runs_at_the_floor_and_each_epoch_logs_its_rate(tiny, tmp_path: Path) -> None:
    args = ["trainer.lr_schedule=cosine", "trainer.lr_warmup_steps=3", "trainer.lr_min_ratio=0.1"]
    cfg = compose_config([*tiny, "trainer.epochs=2", "optimizer.lr=0.02", *args], tmp_path)
    run_train(cfg)
    saved = read_checkpoint(tmp_path / "checkpoints" / "last.pt")["optimizer"]["param_groups"]
    assert saved[0]["initial_lr"] == 0.02
    assert saved[0]["lr"] == pytest.approx(0.002)  # 30 steps: the last one at 0.1 of the rate
    metrics = pd.read_csv(tmp_path / "metrics.csv")
    first_epoch_end = 0.02 * lr_factor(14, 30, "cosine", 3, 0.1)  # 15 steps an epoch
    assert metrics["lr"].tolist() == pytest.approx([first_epoch_end, 0.002])


def test_a_constant_rate_leaves_the_optimizer_alone(tiny, tmp_path: Path) -> None:
    run_train(compose_config([*tiny, "trainer.epochs=1"], tmp_path))
    saved = read_checkpoint(tmp_path / "checkpoints" / "last.pt")["optimizer"]["param_groups"]
    assert "initial_lr" not in saved[0] and "lr" not in pd.read_csv(tmp_path / "metrics.csv")


@pytest.mark.parametrize("shape", ["linear", "cosine"])
def test_a_scheduled_run_resumes_like_an_uninterrupted_one(
    shape: str, resume_matches_uninterrupted, tiny
) -> None:
    # the decay's length fixed: the fixture's first leg has 1 epoch, its resumption 2
    schedule = [f"trainer.lr_schedule={shape}", "trainer.lr_warmup_steps=4"]
    resume_matches_uninterrupted([*tiny, *schedule, "trainer.lr_decay_steps=30"])


def test_a_decay_of_its_own_length_ends_at_the_floor_and_stays(tiny, tmp_path: Path) -> None:
    args = ["trainer.lr_schedule=linear", "trainer.lr_decay_steps=10", "trainer.epochs=1"]
    run_train(compose_config([*tiny, *args, "optimizer.lr=0.02"], tmp_path))  # 15 steps
    saved = read_checkpoint(tmp_path / "checkpoints" / "last.pt")["optimizer"]["param_groups"]
    assert saved[0]["lr"] == 0.0
    with pytest.raises(ConfigError, match=r"lr_warmup_steps=10; expected fewer than trainer.lr_de"):
        run_train(compose_config([*tiny, *args, "trainer.lr_warmup_steps=10"], tmp_path / "w"))
