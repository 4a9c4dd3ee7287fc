"""Pieces of ``TreeLSTMClassifier`` (``tree_lstm.py``): how a leaf reads its word and how a node
records what the loss needs.

``word_block`` maps a leaf to its word vector: the id, optional word dropout (``WordDropout``),
the tuned table and optionally a frozen second channel of the pretrained vectors, then dropout.
``record_node`` wraps a node's state block so every node's hidden state, label and (when
distilling) soft target land in ``Compiler.last_metrics``. ``WordTreeLSTMCell`` is the cell of
trees whose internal nodes have words of their own (the calculator's operators).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

import foldexp.blocks as fb
from foldexp.kernels import Linear
from foldexp.models.cells import BinaryTreeLSTMCell
from foldexp.types import TensorType

__all__ = ["WordDropout", "WordTreeLSTMCell", "record_node", "word_block"]


class WordTreeLSTMCell(nn.Module):
    """A binary Tree-LSTM cell that also reads the node's own word (an operator symbol)."""

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        self.cell = BinaryTreeLSTMCell(hidden_size)
        self.x_gates = Linear(input_size, 5 * hidden_size, bias=False)

    def forward(self, x: torch.Tensor, children: Any) -> tuple[torch.Tensor, torch.Tensor]:
        (hl, cl), (hr, cr) = children
        z = self.cell.gates(torch.cat([hl, hr], dim=1)) + self.x_gates(x)
        i, fl, fr, o, u = z.chunk(5, dim=1)
        c = torch.sigmoid(i) * torch.tanh(u) + torch.sigmoid(fl) * cl + torch.sigmoid(fr) * cr
        return torch.sigmoid(o) * torch.tanh(c), c


class WordDropout(nn.Module):
    """Replaces each word id by the unknown word's with probability ``p`` while training."""

    def __init__(self, p: float, unk_index: int) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"word_dropout={p}; expected 0 <= p < 1")
        self.p, self.unk_index = p, unk_index

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return ids
        drop = torch.rand(ids.shape, device=ids.device) < self.p
        return ids.masked_fill(drop, self.unk_index)


def record_node(state: fb.Block, tree: fb.Block, soft: Any = None, classes: int = 0) -> fb.Block:
    """A node's state, recording it (``h``) and the Python node's label (``label``) as metrics,
    so the loss reads every node; ``tree`` yields the Python node. With ``soft`` (node → class
    probabilities) the node's soft target is recorded too (``soft``, ``classes`` wide)."""
    records = [tree >> fb.InputTransform(_label) >> fb.Scalar("int64") >> fb.Metric("label")]
    if soft is not None:
        records.append(tree >> fb.InputTransform(soft) >> fb.Vector(classes) >> fb.Metric("soft"))
    return (
        fb.AllOf(state >> fb.AllOf(fb.Identity(), fb.GetItem(0) >> fb.Metric("h")), *records)
        >> fb.GetItem(0)
        >> fb.GetItem(0)
    )


def _label(node: Any) -> int:
    return node.label


def word_block(
    vocab: Any,
    embedding: fb.Embedding,
    static: np.ndarray | None,
    word_dropout: float,
    dropout: float,
) -> tuple[fb.Block, int]:
    """A leaf node → its word vector, and the vector's size.

    ``word_dropout`` swaps ids for ``<unk>`` while training; ``static`` (pretrained vectors)
    adds a frozen second channel beside the tuned table; ``dropout`` acts on the vector.
    """
    index = vocab.index
    word_id = fb.InputTransform(lambda node: index(node.word)) >> fb.Scalar("int64")
    if word_dropout:
        # A declared type: probing the module for it would draw from the RNG.
        word_id = word_id >> fb.Function(
            WordDropout(word_dropout, vocab.unk_index), output_type=TensorType((), "int64")
        )
    lookup: fb.Block = fb.Function(embedding)
    size = embedding.weight.shape[1]
    if static is not None:
        # Kim (2014)'s two channels: words never seen in training (their vectors untuned)
        # still agree with the trained ones on the fixed channel.
        frozen = fb.Embedding(initializer=static, trainable=False)
        lookup = fb.AllOf(lookup, fb.Function(frozen)) >> fb.Concat()
        size *= 2
    return word_id >> lookup >> fb.Function(nn.Dropout(dropout)), size
