"""Tree-LSTM models assembled from blocks (the paper's §3.5 shape).

Trees are nested tuples: a leaf is ``(word_id,)`` and an internal node ``(left, right)``, so
``OneOf(key_fn=len, ...)`` dispatches on arity exactly as the paper writes it.
"""

from __future__ import annotations

from typing import Any

from torch import nn

import foldexp.blocks as fb
from foldexp.models.cells import BinaryTreeLSTMCell, TreeLSTMLeaf

__all__ = ["binary_tree_lstm", "tree_lstm_classifier", "random_tree"]


def binary_tree_lstm(
    vocab_size: int, embed_size: int, hidden_size: int, embedding: nn.Module | None = None
) -> fb.Block:
    """A block from a tree to its root state ``(h, c)``."""
    embed = embedding if embedding is not None else fb.Embedding(vocab_size, embed_size)
    leaf_cell = TreeLSTMLeaf(embed_size, hidden_size)
    cell = BinaryTreeLSTMCell(hidden_size)
    tree = fb.ForwardDeclaration(name="tree")
    word = fb.GetItem(0) >> fb.Scalar("int64") >> fb.Function(embed) >> fb.Function(leaf_cell)
    pair = fb.AllOf(fb.GetItem(0) >> tree(), fb.GetItem(1) >> tree()) >> fb.Function(cell)
    tree.resolve_to(fb.OneOf(key_fn=len, case_blocks=[(1, word), (2, pair)]))
    return tree()


def tree_lstm_classifier(
    vocab_size: int, embed_size: int, hidden_size: int, num_classes: int
) -> fb.Block:
    """Tree → logits over ``num_classes`` from the root's hidden state."""
    return (
        binary_tree_lstm(vocab_size, embed_size, hidden_size)
        >> fb.GetItem(0)
        >> fb.Function(nn.Linear(hidden_size, num_classes))
    )


def random_tree(n_leaves: int, vocab_size: int, rng: Any) -> tuple:
    """A uniformly random binary tree shape with ``n_leaves`` leaves (nested tuples)."""
    if n_leaves == 1:
        return (int(rng.integers(vocab_size)),)
    k = int(rng.integers(1, n_leaves))
    return (random_tree(k, vocab_size, rng), random_tree(n_leaves - k, vocab_size, rng))
