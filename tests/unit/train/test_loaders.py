"""Run-long loaders: workers survive epochs (keeping what they cached) and follow each epoch's
new batch order."""

from __future__ import annotations

import os
from typing import Any

from foldexp.train.loaders import RunLoaders
from foldexp.train.sampler import ShardedBatchSampler


class _CountingModel:
    """``collate`` reports the worker it ran in and how many batches that worker built."""

    def __init__(self) -> None:
        self.built = 0

    def collate(self, examples: list[Any]) -> tuple[int, int, list[Any]]:
        self.built += 1
        return os.getpid(), self.built, examples


def _epoch(loaders: RunLoaders, data: list[int], order: list[int]) -> list[tuple[int, int, list]]:
    sampler = ShardedBatchSampler(order, 2, [1] * len(data))
    return list(loaders.get("train", data, sampler))


def test_workers_persist_across_epochs_and_follow_the_new_order() -> None:
    data = list(range(10, 16))
    loaders = RunLoaders(_CountingModel(), workers=1, seed=0)
    try:
        first = _epoch(loaders, data, [0, 1, 2, 3, 4, 5])
        pids = loaders.worker_pids("train")
        second = _epoch(loaders, data, [5, 4, 3, 2, 1, 0])
        assert loaders.worker_pids("train") == pids and len(pids) == 1
    finally:
        loaders.close()
    assert [b[2] for b in first] == [[10, 11], [12, 13], [14, 15]]
    assert [b[2] for b in second] == [[15, 14], [13, 12], [11, 10]]
    assert {b[0] for b in first + second} == {pids[0]} != {os.getpid()}
    assert [b[1] for b in second] == [4, 5, 6]  # the same worker went on counting


def test_without_workers_collate_runs_here() -> None:
    model = _CountingModel()
    loaders = RunLoaders(model, workers=0, seed=0)
    batches = _epoch(loaders, [1, 2, 3], [2, 1, 0])
    assert [b[2] for b in batches] == [[3, 2], [1]] and model.built == 2
    assert loaders.worker_pids("train") == []
