"""Soft targets for knowledge distillation (``model.teacher``; Hinton et al. 2015).

The Fold paper's ensemble of Tree-LSTMs beats its single models (``foldexp ensemble``). A single
model can take part of that gain by training toward the ensemble's class probabilities as well
as the gold labels: every node of every training tree gets the average of the teachers'
probabilities at that node. The teachers are runs (``results.json`` beside
``checkpoints/best.pt``, as ``foldexp ensemble`` finds them); each is rebuilt from its own
config and must have trained on the same training trees as the student.

A Tree-LSTM node's prediction depends on its subtree alone, so the targets are keyed by the node
itself (trees compare and hash by value): equal subtrees share one entry, whichever tree they
sit in. Building the teachers draws from the RNG, so the caller's RNG state is restored after,
and a distilled run stays reproducible and resumable.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from foldexp.train.checkpoint import rng_state, set_rng_state
from foldexp.train.ensemble import dataset_key, find_runs, load_run_model, run_bundles

__all__ = ["teacher_targets"]


def _node_probabilities(model: Any, trees: list[Any], batch_size: int) -> torch.Tensor:
    """Every node's class probabilities, trees in order, each tree's nodes in post-order."""
    rows = []
    with torch.no_grad():
        for start in range(0, len(trees), batch_size):
            chunk = trees[start : start + batch_size]
            probs, labels = model.node_probabilities(model.collate(chunk))
            expected = [label for tree in chunk for label in tree.labels()]
            if labels.tolist() != expected:  # the rows must follow Tree.nodes()
                raise RuntimeError("node_probabilities: rows are not in Tree.nodes() order")
            rows.append(probs.float().cpu())
    return torch.cat(rows)


def teacher_targets(
    dirs: Sequence[str | Path], trees: list[Any], batch_size: int = 256
) -> dict[Any, np.ndarray]:
    """Each node of ``trees`` → the teachers' mean class probabilities there."""
    saved = rng_state()
    try:
        runs = find_runs(dirs)
        bundles, _ = run_bundles(
            runs,
            "train",
            lambda run, keys: (
                f"model.teacher: {run} trained on other trees than this run (its dataset "
                "config differs); a teacher must have seen the same training set"
            ),
            expected=trees,
        )
        total = None
        for run, config in runs:
            model = load_run_model(run, config, bundles[dataset_key(config)])
            if not hasattr(model, "node_probabilities"):
                raise TypeError(
                    f"model.teacher: {run}: {type(model).__name__} gives no "
                    "node_probabilities(batch)"
                )
            probs = _node_probabilities(model, trees, batch_size)
            total = probs if total is None else total + probs
    finally:
        set_rng_state(saved)
    mean = (total / len(runs)).numpy()
    nodes = [node for tree in trees for node in tree.nodes()]
    return {node: mean[i] for i, node in enumerate(nodes)}
