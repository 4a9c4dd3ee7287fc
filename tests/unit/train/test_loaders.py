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


class _TensorModel:
    """``collate`` returns tensors of several kinds and a compiled plan."""

    def __init__(self) -> None:
        from foldexp import Compiler
        from foldexp.models.tree_lstm import tree_lstm_classifier

        self.compiler = Compiler(tree_lstm_classifier(20, 4, 4, 3))

    def collate(self, examples: list[Any]) -> dict[str, Any]:
        import torch

        trees = [((e % 20,), ((1,), (e % 7,))) for e in examples]
        base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
        return {
            "plan": self.compiler.build(trees),
            "ids": torch.tensor(examples),
            "half": torch.ones(2, dtype=torch.bfloat16),  # no numpy dtype: torch pickles it
            "strided": base.t(),
            "trees": trees,
        }


def test_worker_batches_arrive_whole_with_their_tensors() -> None:
    import torch

    from foldexp.train.loaders import batch_to_bytes

    model = _TensorModel()
    loaders = RunLoaders(model, workers=1, seed=0)
    try:
        batches = _epoch(loaders, list(range(6)), [0, 1, 2, 3, 4, 5])
    finally:
        loaders.close()
    for b in batches:
        here = model.collate(b["ids"].tolist())
        assert b["half"].dtype == torch.bfloat16 and torch.equal(b["strided"], here["strided"])
        b["ids"] += 0  # writable, as a tensor built here is
        with torch.no_grad():
            torch.testing.assert_close(
                model.compiler.run(b["plan"]), model.compiler.run(here["plan"])
            )
    roundtrip = __import__("pickle").loads(batch_to_bytes(here))
    assert torch.equal(roundtrip["ids"], here["ids"]) and roundtrip["trees"] == here["trees"]


def test_bytes_keep_expanded_tensors_small_and_arrays_writable() -> None:
    import pickle

    import numpy as np
    import torch

    from foldexp.train.loaders import batch_to_bytes

    frozen = np.arange(4)
    frozen.flags.writeable = False
    batch = {"wide": torch.zeros(1).expand(1_000_000), "array": frozen}
    data = batch_to_bytes(batch)
    back = pickle.loads(data)
    assert len(data) < 10_000 and back["wide"].stride() == (0,)
    assert back["array"].flags.writeable and back["array"].tolist() == [0, 1, 2, 3]
