"""A Tree-LSTM whose leaves read a bidirectional LSTM over the sentence (a "leaf LSTM").

In the plain Tree-LSTM a leaf sees only its own word, so "bad" reads the same in "not bad" and
in "bad film" until the tree combines them. Here an LSTM runs over the leaves left to right and
another right to left (``RNN`` blocks, batched by position across the sentences of a batch), and
each leaf's Tree-LSTM state is computed from its two context states instead of the bare word
vector (Choi et al. 2018 and Kim et al. 2019 put such a leaf LSTM under a Tree-LSTM).

The recursion then needs the sentence's context states at every node. Its input is the pair
``(states, (node, offset))``: the list of per-leaf context states and the Python node with the
number of leaves left of it, so a leaf takes element ``offset`` of the list (``Nth``) and an
internal node hands ``offset`` on to its children.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

import foldexp.blocks as fb
from foldexp.types import TensorType, TupleType

__all__ = ["LSTMStep", "contextual_tree"]

# A binary ``foldexp.data.trees.Tree`` (``children``, ``label``, ``size()``, ``leaves()``); models
# take it by shape and do not import the data layer.
Tree = Any


class LSTMStep(nn.Module):
    """An LSTM step as an ``RNN`` cell: ``(x, (h, c)) → (h, (h, c))``."""

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        self.cell = nn.LSTMCell(input_size, hidden_size)

    def forward(
        self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        h, c = self.cell(x, state)
        return h, (h, c)


def _leaf_count(node: Tree) -> int:
    """Leaves under ``node`` in a binary tree: (nodes + 1) / 2."""
    return (node.size() + 1) // 2


def _leaves(node: Tree) -> list[Tree]:
    return node.leaves()


def _tree(pair: tuple[Tree, int]) -> Tree:
    return pair[0]


def _offset(pair: tuple[Tree, int]) -> int:
    return pair[1]


def _left(pair: tuple[Tree, int]) -> tuple[Tree, int]:
    node, offset = pair
    return node.children[0], offset


def _right(pair: tuple[Tree, int]) -> tuple[Tree, int]:
    node, offset = pair
    return node.children[1], offset + _leaf_count(node.children[0])


def _arity(x: tuple[Any, tuple[Tree, int]]) -> int:
    return len(x[1][0].children)


def _root(tree: Tree) -> tuple[Tree, int]:
    return tree, 0


def contextual_tree(
    word: fb.Block,
    steps: tuple[LSTMStep, LSTMStep],
    leaf_cell: nn.Module,
    cell: nn.Module,
    node: Callable[[fb.Block, fb.Block], fb.Block],
) -> fb.Block:
    """A block from a binary ``Tree`` to its root state ``(h, c)``.

    Args:
        word: a leaf ``Tree`` → its word vector.
        steps: the left-to-right and right-to-left LSTM steps over the word vectors;
            ``leaf_cell`` takes their two states concatenated.
        leaf_cell: context vector → leaf state; ``cell``: ``(left, right)`` → state.
        node: ``node(state, tree)`` wraps each node's state block, given a block that yields
            the Python node (to record metrics from it); it must output the state.
    """
    size = steps[0].cell.hidden_size
    state_type = TupleType(TensorType(size), TensorType(size))
    forward = fb.RNN(fb.Function(steps[0]), state_type) >> fb.GetItem(0)
    backward = (
        fb.Slice(step=-1)
        >> fb.RNN(fb.Function(steps[1]), state_type)
        >> fb.GetItem(0)
        >> fb.Slice(step=-1)
    )
    context = (
        fb.InputTransform(_leaves)
        >> fb.Map(word)
        >> fb.AllOf(forward, backward)
        >> fb.ZipWith(fb.Concat())
    )

    def along(step: Callable[[tuple[Tree, int]], tuple[Tree, int]]) -> fb.Block:
        # Keep the context states, move the (node, offset) pair.
        return fb.AllOf(fb.GetItem(0), fb.GetItem(1) >> fb.InputTransform(step))

    tree = fb.ForwardDeclaration(name="tree")
    leaf = along(_offset) >> fb.Nth() >> fb.Function(leaf_cell)
    internal = fb.AllOf(along(_left) >> tree(), along(_right) >> tree()) >> fb.Function(cell)
    state = fb.OneOf(_arity, {0: leaf, 2: internal})
    tree.resolve_to(node(state, fb.GetItem(1) >> fb.InputTransform(_tree)))
    return fb.AllOf(context, fb.InputTransform(_root)) >> tree()
