"""A sequence LSTM sentence classifier assembled from blocks: the SST baseline of Tai et al.

A sentence is a list of words; ``Map`` embeds every word and a ``Fold`` runs an LSTM cell over
them left to right (the paper's §3.3 pipeline with an LSTM instead of an FC cell). The final
hidden state goes through dropout to a linear classifier. Sentences of different lengths batch
by depth: step ``t`` of every sentence that has a ``t``-th word runs as one call.

Inputs are ``(tokens, label)`` pairs as ``foldexp.experiments.datasets.sst_sentences`` (SST
trees' words and root labels) and ``foldexp.experiments.text_data.text_csv`` (a CSV of one's own)
make them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import foldexp.blocks as fb
from foldexp.compiler.schedule import Plan
from foldexp.executor.compiled import Compiler
from foldexp.kernels import Dropout, Linear
from foldexp.models.cells import LSTMCell
from foldexp.types import TensorType, TupleType

__all__ = ["sentence_lstm", "SequenceLSTMClassifier", "SentenceBatch"]


def sentence_lstm(word: fb.Block, embed_size: int, hidden_size: int) -> fb.Block:
    """A block from a list of words to the LSTM's last hidden state (zeros for no words).

    ``word`` maps one word to a vector of ``embed_size``.
    """
    state = TupleType(TensorType(hidden_size), TensorType(hidden_size))
    cell = fb.Function(LSTMCell(embed_size, hidden_size))
    return fb.Map(word) >> fb.Fold(cell, fb.Zeros(state)) >> fb.GetItem(0)


@dataclass
class SentenceBatch:
    """A collated batch: the schedule (built in a DataLoader worker) and the labels."""

    plan: Plan
    labels: torch.Tensor
    size: int

    @property
    def root_labels(self) -> torch.Tensor:
        """The sentence labels, by the name tree batches give them (``foldexp ensemble``)."""
        return self.labels


class SequenceLSTMClassifier(nn.Module):
    """LSTM over a sentence's words, classified from the last hidden state.

    Args:
        vocab: maps words to ids (``foldexp.data.vocab.Vocabulary``).
        num_classes: label classes (5 fine-grained, 2 binary); label ``-1`` is ignored.
        embed_size, hidden_size: sizes; ``embeddings`` (a matrix) overrides ``embed_size``.
        dropout: on word embeddings and on the final state fed to the classifier.
        freeze_embeddings: keep pretrained ``embeddings`` fixed.
        class_names: one name per class (default ``"0"``, ``"1"``, ...), naming the columns of
            ``predict`` (``prediction_columns``).
    """

    def __init__(
        self,
        vocab: Any,
        num_classes: int,
        embed_size: int = 64,
        hidden_size: int = 64,
        dropout: float = 0.0,
        freeze_embeddings: bool = False,
        embeddings: np.ndarray | None = None,
        class_names: list[str] | None = None,
        name: str = "seq_lstm",
    ) -> None:
        super().__init__()
        if embeddings is not None:
            embed_size = int(embeddings.shape[1])
        self.vocab, self.num_classes = vocab, num_classes
        self.class_names = (
            [str(k) for k in range(num_classes)]
            if class_names is None
            else [str(c) for c in class_names]
        )
        if len(self.class_names) != num_classes:
            raise ValueError(f"class_names={class_names}; expected {num_classes} names")
        embedding = fb.Embedding(
            len(vocab),
            embed_size,
            initializer=embeddings,
            trainable=not (freeze_embeddings and embeddings is not None),
        )
        word = (
            fb.InputTransform(vocab.index)
            >> fb.Scalar("int64")
            >> fb.Function(embedding)
            >> fb.Function(Dropout(dropout))
        )
        sentence = fb.GetItem(0) >> sentence_lstm(word, embed_size, hidden_size)
        # Examples are immutable and recur every epoch: trace each sentence once.
        self.compiler = Compiler(sentence, cache_traces=True)
        self.dropout = Dropout(dropout)
        self.classify = Linear(hidden_size, num_classes)

    def collate(self, examples: Sequence[tuple[list[str], int]]) -> SentenceBatch:
        """Traces and schedules a batch (safe to call in DataLoader workers)."""
        labels = torch.tensor([label for _, label in examples], dtype=torch.int64)
        return SentenceBatch(self.compiler.build(examples), labels, len(examples))

    def logits(self, batch: SentenceBatch) -> torch.Tensor:
        """Class scores, one row per sentence."""
        return self.classify(self.dropout(self.compiler.run(batch.plan)))

    def forward(self, batch: SentenceBatch) -> dict[str, torch.Tensor]:
        """Mean cross-entropy over labelled sentences, and the correct and labelled counts."""
        logits = self.logits(batch)
        labels = batch.labels.to(logits.device).clamp(min=-1)
        # Unlabelled sentences (label < 0) weigh nothing, neither indexed out nor tested for
        # (both make the host wait for a GPU); none labelled: a loss of 0, not 0 / 0.
        loss = F.cross_entropy(logits, labels, ignore_index=-1, reduction="sum")
        loss = loss / (labels >= 0).sum().clamp(min=1)
        return {"loss": loss, **self.score_roots(logits, labels)}

    def root_probabilities(self, batch: SentenceBatch) -> torch.Tensor:
        """Class probabilities of each sentence (``foldexp ensemble`` averages them)."""
        return self.logits(batch).softmax(1)

    def predict(self, batch: SentenceBatch) -> torch.Tensor:
        """Class probabilities, one row per sentence (``foldexp predict``)."""
        return self.logits(batch).softmax(1)

    def prediction_columns(self) -> list[str]:
        """``p_<class name>`` for each class: the columns of ``predict``."""
        return [f"p_{name}" for name in self.class_names]

    def score_roots(self, scores: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        """Correct and labelled counts of class scores (logits or probabilities)."""
        mask = labels >= 0
        return {"correct": ((scores.argmax(1) == labels) & mask).sum(), "count": mask.sum()}

    @staticmethod
    def summarize(sums: dict[str, float]) -> dict[str, float]:
        """Sentence (root) accuracy from summed counts."""
        return {"accuracy": sums["correct"] / max(1.0, sums["count"])}
