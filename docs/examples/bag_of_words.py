"""A model of one's own for ``foldexp train``: the mean of a tree's word embeddings.

Any dataset of labelled trees works (``calculator``, ``trees_ptb``, ``sst``)::

    PYTHONPATH=docs/examples foldexp train model=custom model._target_=bag_of_words.BagOfWords \\
        +model.size=32

The class follows ``foldexp.models.contract``: it takes its own config keys (``size``) and the
dataset facts it names (``vocab``, ``num_classes``), and has ``collate``, ``forward`` and
``summarize``; ``predict`` and ``prediction_columns`` make ``foldexp predict`` work too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

import foldexp.blocks as fb
from foldexp import Compiler


@dataclass
class Batch:
    plan: Any  # the engine's schedule for the batch
    labels: torch.Tensor  # (examples,) root labels, -1 where unlabelled
    size: int


class BagOfWords(torch.nn.Module):
    """Tree → mean embedding of its words → class scores."""

    def __init__(self, vocab: Any, num_classes: int, size: int = 16) -> None:
        super().__init__()
        word = fb.InputTransform(vocab.index) >> fb.Scalar("int64")
        word = word >> fb.Function(torch.nn.Embedding(len(vocab), size))
        words = fb.InputTransform(lambda tree: [w for w in tree.words() if w is not None])
        self.compiler = Compiler(words >> fb.Map(word) >> fb.Mean(), cache_traces=True)
        self.out = torch.nn.Linear(size, num_classes)
        self.num_classes = num_classes

    def collate(self, trees: list[Any]) -> Batch:
        labels = torch.tensor([tree.label for tree in trees], dtype=torch.int64)
        return Batch(self.compiler.build(trees), labels, len(trees))

    def forward(self, batch: Batch) -> dict[str, torch.Tensor]:
        logits = self.out(self.compiler.run(batch.plan))
        labelled = batch.labels >= 0
        loss = F.cross_entropy(logits[labelled], batch.labels[labelled])
        correct = (logits.argmax(1) == batch.labels)[labelled].sum()
        return {"loss": loss, "correct": correct, "count": labelled.sum()}

    def summarize(self, sums: dict[str, Any]) -> dict[str, float]:
        return {"accuracy": float(sums["correct"]) / max(1.0, float(sums["count"]))}

    def predict(self, batch: Batch) -> torch.Tensor:
        return self.out(self.compiler.run(batch.plan)).softmax(1)

    def prediction_columns(self) -> list[str]:
        return [f"p_{k}" for k in range(self.num_classes)]
