"""The child-sum Tree-LSTM (Tai et al. 2015, §3.1): trees whose nodes have any number of children.

A node sums its children's hidden states, ``h̃ = Σ_k h_k``, takes its input, output and update
gates from ``h̃`` (plus its word, when it has one), and gives every child a forget gate of its
own, ``f_k = σ(U_f h_k + W_f x + b_f)``, so ``c = i ⊙ u + Σ_k f_k ⊙ c_k`` and
``h = o ⊙ tanh(c)``. In blocks, a variable number of children is a sequence::

    children = InputTransform(node → node.children) >> Map(tree())      # [(h_k, c_k), ...]
    h_sum    = Map(GetItem(0)) >> Sum()                                 # h̃
    fc_sum   = Map(Function(ChildForget)) >> Sum()                      # Σ f_k ⊙ c_k
    internal = children >> AllOf(h_sum, fc_sum) >> Function(ChildSumCombine)

and a node with a word of its own (calculator operators) zips its projected word, repeated by
``Broadcast``, with the children (``ZipWith``) so each forget gate reads it. The engine batches
the children of all nodes at one depth together, whatever their number. A leaf is
``TreeLSTMLeaf`` on its word, as in the binary model. The cells are in ``cells.py``.

``ChildSumTreeLSTMClassifier`` is ``TreeLSTMClassifier`` (loss on every labelled node, the same
metrics, ``predict``) with these cells in place of the binary ones.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import foldexp.blocks as fb
from foldexp.kernels import Linear
from foldexp.models.cells import (
    ChildForget,
    ChildSumCombine,
    TreeLSTMLeaf,
    WordChildForget,
    WordChildSumCombine,
)
from foldexp.models.tree_accuracy import Polarity
from foldexp.models.tree_lstm import TreeLSTMClassifier, TreeShape

__all__ = ["ChildSumTreeLSTMClassifier", "child_sum_tree"]


def _children(node: Any) -> tuple:
    return node.children


def _has_children(node: Any) -> int:
    return int(bool(node.children))


def child_sum_tree(
    word: fb.Block,
    embed_size: int,
    hidden_size: int,
    *,
    internal_words: bool = False,
    recurrent_dropout: float = 0.0,
    forget_bias: float = 0.0,
    node: Callable[[fb.Block, fb.Block], fb.Block] | None = None,
) -> fb.Block:
    """A block from a ``Tree`` (any number of children per node) to its root state ``(h, c)``.

    ``word`` maps a node to its word vector (``embed_size``); ``internal_words``: internal nodes
    have a word too; ``node(state, tree)`` wraps each node's state block (e.g. to record it as a
    metric; default: as it is).
    """
    tree = fb.ForwardDeclaration(name="child_sum_tree")
    children = fb.InputTransform(_children) >> fb.Map(tree())
    h_sum = fb.Map(fb.GetItem(0)) >> fb.Sum()
    if internal_words:
        x_gates = word >> fb.Function(Linear(embed_size, 4 * hidden_size))
        forget = fb.ZipWith(fb.Function(WordChildForget(hidden_size, forget_bias)))
        internal = fb.AllOf(x_gates, children) >> fb.AllOf(
            fb.GetItem(0),
            fb.GetItem(1) >> h_sum,
            fb.AllOf(fb.GetItem(1), fb.GetItem(0) >> fb.Broadcast()) >> forget >> fb.Sum(),
        )
        internal = internal >> fb.Function(WordChildSumCombine(hidden_size, recurrent_dropout))
    else:
        fc_sum = fb.Map(fb.Function(ChildForget(hidden_size, forget_bias))) >> fb.Sum()
        internal = (
            children
            >> fb.AllOf(h_sum, fc_sum)
            >> fb.Function(ChildSumCombine(hidden_size, recurrent_dropout))
        )
    leaf = word >> fb.Function(TreeLSTMLeaf(embed_size, hidden_size, recurrent_dropout))
    state = fb.OneOf(_has_children, {0: leaf, 1: internal})
    tree.resolve_to(node(state, fb.Identity()) if node is not None else state)
    return tree()


class ChildSumTreeLSTMClassifier(TreeLSTMClassifier):
    """Child-sum Tree-LSTM classifier: trees of any arity, a loss on every labelled node.

    Arguments as ``TreeLSTMClassifier`` (``foldexp.models.tree_lstm``), less distillation;
    ``forget_bias`` starts every child's forget gate.
    """

    def __init__(
        self,
        vocab: Any,
        num_classes: int,
        embed_size: int = 64,
        hidden_size: int = 64,
        dropout: float = 0.0,
        embedding_dropout: float | None = None,
        freeze_embeddings: bool = False,
        node_loss: bool = True,
        embedding_lr: float | None = None,
        embedding_weight_decay: float | None = None,
        embedding_optimizer: str | None = None,
        recurrent_dropout: float = 0.0,
        forget_bias: float = 0.0,
        internal_words: bool = False,
        embeddings: np.ndarray | None = None,
        predict_classes: int | None = None,
        polarity: Polarity | None = None,
        class_names: list[str] | None = None,
        name: str = "child_sum_tree_lstm",
    ) -> None:
        super().__init__(
            vocab,
            num_classes,
            embed_size=embed_size,
            hidden_size=hidden_size,
            dropout=dropout,
            embedding_dropout=embedding_dropout,
            freeze_embeddings=freeze_embeddings,
            node_loss=node_loss,
            embedding_lr=embedding_lr,
            embedding_weight_decay=embedding_weight_decay,
            embedding_optimizer=embedding_optimizer,
            recurrent_dropout=recurrent_dropout,
            forget_bias=forget_bias,
            internal_words=internal_words,
            embeddings=embeddings,
            predict_classes=predict_classes,
            polarity=polarity,
            class_names=class_names,
            name=name,
        )

    def _tree_block(self, word: fb.Block, shape: TreeShape) -> fb.Block:
        """The child-sum recursion, every node recorded."""
        return child_sum_tree(
            word,
            shape.embed_size,
            shape.hidden_size,
            internal_words=shape.internal_words,
            recurrent_dropout=shape.recurrent_dropout,
            forget_bias=shape.forget_bias,
            node=self._record,
        )
