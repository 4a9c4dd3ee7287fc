"""``trainer.ema_decay``: an average of the weights is evaluated, stored in ``best.pt``, and
carried through a resumed run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from foldexp.train.app import compose_config
from foldexp.train.ema import ParamAverage
from foldexp.train.loop import run_train


def test_average_follows_the_warm_up_formula_and_swaps_back() -> None:
    model = torch.nn.Linear(2, 1)
    start = [p.detach().clone() for p in model.parameters()]
    avg = ParamAverage(model, decay=0.9)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    avg.update()  # step 1: d = min(0.9, 2/11)
    d = 2 / 11
    for a, s in zip(avg.average, start):
        torch.testing.assert_close(a, d * s + (1 - d) * (s + 1))
    raw = [p.detach().clone() for p in model.parameters()]
    with avg.applied():
        for p, a in zip(model.parameters(), avg.average):
            torch.testing.assert_close(p.detach(), a)
    for p, r in zip(model.parameters(), raw):
        assert torch.equal(p.detach(), r)


def test_state_round_trips_and_mismatch_fails() -> None:
    model = torch.nn.Linear(2, 1)
    avg = ParamAverage(model, decay=0.99)
    avg.update()
    other = ParamAverage(torch.nn.Linear(2, 1), decay=0.99)
    other.load_state_dict(avg.state_dict())
    assert other.steps == 1 and all(torch.equal(a, b) for a, b in zip(avg.average, other.average))
    with pytest.raises(ValueError, match="does not match"):
        ParamAverage(torch.nn.Linear(3, 1), 0.99).load_state_dict(avg.state_dict())
    with pytest.raises(ValueError, match="ema_decay"):
        ParamAverage(model, 1.0)


def test_best_checkpoint_holds_the_average_and_resume_continues_it(
    tmp_path: Path, resume_matches_uninterrupted, tiny
) -> None:
    reference = resume_matches_uninterrupted([*tiny, "trainer.ema_decay=0.9", "model.dropout=0.2"])
    ckpt = tmp_path / "ref" / "checkpoints"
    last = torch.load(ckpt / "last.pt", weights_only=True)
    best = torch.load(ckpt / "best.pt", weights_only=True)
    assert last["ema"]["steps"] == reference["steps"]
    # best.pt was written while the average was swapped in: its weights are the average.
    # (The state dict names the shared word table twice; parameters() once.)
    for name, p in best["model"].items():
        assert any(torch.equal(p, a) for a in best["ema"]["average"]), name
    assert any(
        not torch.equal(p, a) for p, a in zip(last["model"].values(), last["ema"]["average"])
    )


def test_resuming_without_the_average_it_was_written_with_is_named(tmp_path: Path, tiny) -> None:
    run_train(compose_config([*tiny, "trainer.epochs=1"], tmp_path))
    with pytest.raises(ValueError, match=r"trainer\.ema_decay: 0\.0 in the run, 0\.9 now"):
        run_train(
            compose_config(
                [*tiny, "trainer.epochs=2", "trainer.resume=true", "trainer.ema_decay=0.9"],
                tmp_path,
            )
        )


def test_bad_decay_fails_before_any_work(tmp_path: Path, tiny) -> None:
    with pytest.raises(ValueError, match=r"trainer.ema_decay=1.5"):
        run_train(compose_config([*tiny, "trainer.ema_decay=1.5"], tmp_path))
    assert not (tmp_path / "checkpoints").exists()
