"""Which epoch is the best: ``train.evaluate.improves`` over a run's dev scores."""

from __future__ import annotations

import math

import pytest

from foldexp.train.evaluate import improves


def best_epochs(scores: list[float], better=max) -> list[int]:
    progress = {"best": None, "best_epoch": None, "bad_epochs": 0}
    chosen = []
    for epoch, score in enumerate(scores):
        improves({"dev_accuracy": score}, "dev_accuracy", better, progress, epoch)
        chosen.append(progress["best_epoch"])
    return chosen


def test_a_higher_score_is_better_and_a_tie_keeps_the_earlier_epoch() -> None:
    assert best_epochs([0.5, 0.7, 0.7, 0.6]) == [0, 1, 1, 1]
    assert best_epochs([2.0, 1.0, 1.5], better=min) == [0, 1, 1]


@pytest.mark.parametrize("better", [max, min])
def test_a_diverged_epoch_never_becomes_the_best(better) -> None:
    """``max(nan, x)`` is ``nan``: a NaN dev score replaced the best epoch (and best.pt)."""
    assert best_epochs([0.5, math.nan, 0.4, math.nan], better) == [
        0,
        0,
        0 if better is max else 2,
        0 if better is max else 2,
    ]


@pytest.mark.parametrize("better", [max, min])
def test_a_run_whose_every_dev_score_is_nan_still_has_a_best_epoch(better) -> None:
    """The first epoch stands (best.pt exists for the test) until a number beats it: with
    none, every epoch's NaN was refused, no best.pt was written and the run ended at its test
    with ``best.pt: no such file``."""
    assert best_epochs([math.nan, math.nan, math.nan], better) == [0, 0, 0]
    assert best_epochs([math.nan, math.nan, 0.3, math.nan], better) == [0, 0, 2, 2]


def test_a_number_beats_a_nan_best_from_an_older_checkpoint() -> None:
    progress = {"best": math.nan, "best_epoch": 0, "bad_epochs": 2}
    assert improves({"dev_loss": 3.0}, "dev_loss", min, progress, 1)
    assert progress["best"] == 3.0 and progress["best_epoch"] == 1


def test_an_unknown_metric_names_the_columns() -> None:
    with pytest.raises(
        KeyError, match="trainer.select_metric='dev_f1' is not a metrics.csv column"
    ):
        improves({"dev_loss": 1.0}, "dev_f1", min, {"best": None}, 0)
