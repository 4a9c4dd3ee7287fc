"""Soft targets for knowledge distillation (``model.teacher``; Hinton et al. 2015).

The Fold paper's ensemble of Tree-LSTMs beats its single models (``foldexp ensemble``). A single
model can take part of that gain by training toward the ensemble's class probabilities as well
as the gold labels: every node of every training tree gets the average of the teachers'
probabilities at that node. The teachers are runs (``results.json`` beside
``checkpoints/best.pt``, as ``foldexp ensemble`` finds them); each is rebuilt from its own
config and must have trained on the same training trees as the student. The Tree-LSTM's
``prepare_training`` hook (``foldexp.models.contract``) calls ``prepare_distillation``; the
trainer supplies the training trees and the runs (``TrainingSetup``) and knows nothing of it.

A Tree-LSTM node's prediction depends on its subtree alone, so the targets are keyed by the node
itself (trees compare and hash by value): equal subtrees share one entry, whichever tree they
sit in. Building the teachers draws from the RNG; the trainer restores it after the hook, so a
distilled run stays reproducible and resumable.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from foldexp.models.contract import TrainingSetup

__all__ = ["check_teachers", "prepare_distillation", "teacher_targets"]

log = logging.getLogger("foldexp.train")


def check_teachers(teachers: Sequence[str | Path] | None) -> None:
    """A distillation preset must name its teachers, and they must exist."""
    if teachers is not None and not teachers:  # a distillation preset, its teachers not given
        raise ValueError(
            "model.teacher=[] names no teacher: give the teachers' run or sweep folders, e.g. "
            "'model.teacher=[outputs/fold_sweep]'"
        )
    for path in teachers or []:
        if not Path(path).exists():
            raise FileNotFoundError(f"model.teacher: {path} does not exist")


def prepare_distillation(model: Any, setup: TrainingSetup) -> None:
    """With ``model.teacher`` set, gives ``model`` its soft targets (``set_soft_targets``)."""
    check_teachers(model.teacher)
    if model.teacher:
        targets = teacher_targets(list(model.teacher), setup)
        model.set_soft_targets(targets)
        log.info("model.teacher: soft targets for %d distinct nodes", len(targets))


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


def teacher_targets(dirs: Sequence[str | Path], setup: TrainingSetup) -> dict[Any, np.ndarray]:
    """Each node of ``setup.train`` → the teachers' mean class probabilities there."""
    trees = setup.train
    total, count = None, 0
    teachers = setup.load_runs(
        dirs,
        lambda run, keys: (
            f"model.teacher: {run} trained on other trees than this run (its dataset "
            "config differs); a teacher must have seen the same training set"
        ),
    )
    for run, model in teachers:
        if not hasattr(model, "node_probabilities"):
            raise TypeError(
                f"model.teacher: {run}: {type(model).__name__} gives no node_probabilities(batch)"
            )
        probs = _node_probabilities(model, list(trees), setup.batch_size)
        total, count = (probs if total is None else total + probs), count + 1
    mean = (total / count).numpy()
    nodes = [node for tree in trees for node in tree.nodes()]
    return {node: mean[i] for i, node in enumerate(nodes)}
