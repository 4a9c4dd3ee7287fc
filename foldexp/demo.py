"""The engine demo: the schedule of a batch of trees and the speedup of batching.

``foldexp demo`` (and ``make run`` until the training command lands) builds a Tree-LSTM from
blocks, prints the schedule of a small batch of random trees — one line per (depth, operation) —
then times forward + backward over a larger batch, batched versus one tree at a time.
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F

from foldexp.executor.compiled import Compiler
from foldexp.models.tree_lstm import random_tree, tree_lstm_classifier

__all__ = ["run_demo"]


def _median_seconds(fn, repeats: int) -> float:  # type: ignore[no-untyped-def]
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def run_demo(
    trees: int = 64, leaves: int = 32, hidden: int = 64, repeats: int = 3, seed: int = 0
) -> dict[str, float]:
    """Prints a schedule and a timing comparison; returns the figures."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    vocab = 1000
    model = Compiler(tree_lstm_classifier(vocab, hidden, hidden, 5))
    print(model.build([random_tree(6, vocab, rng) for _ in range(4)]).describe())

    batch = [random_tree(leaves, vocab, rng) for _ in range(trees)]
    labels = torch.as_tensor(rng.integers(0, 5, size=trees))

    def batched() -> None:
        F.cross_entropy(model(batch), labels).backward()

    def one_at_a_time() -> None:
        for t, y in zip(batch[:8], labels[:8]):
            F.cross_entropy(model([t]), y.view(1)).backward()

    t_batched = _median_seconds(batched, repeats) / trees
    stats = dict(model.last_stats)
    t_single = _median_seconds(one_at_a_time, repeats) / 8
    print(
        f"\nTree-LSTM forward+backward, {trees} random trees of {leaves} leaves, hidden {hidden}:\n"
        f"  batched        {1 / t_batched:8.1f} trees/s  ({stats['calls']} calls per batch, "
        f"max depth {stats['max_depth']}, {stats['nodes']} nodes)\n"
        f"  batch of one   {1 / t_single:8.1f} trees/s (each tree alone, batched within itself)\n"
        f"  speedup        {t_single / t_batched:8.1f}x"
    )
    return {
        "batched_trees_per_s": 1 / t_batched,
        "single_trees_per_s": 1 / t_single,
        "speedup": t_single / t_batched,
    }
