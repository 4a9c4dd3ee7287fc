"""The model Table 1 of the Fold paper times, run three ways: engine, manual by level, manual
by node (``table1.py`` and ``scaling.py`` time them).

The paper's benchmark (TF Fold's ``iclr_2017_benchmark.py``) uses leaves that are embedding
lookups straight into the state (a table with one row per leaf position, 128 rows) and internal
nodes that are "a variation on the Tree-LSTM": one hidden layer over ``[left; right]``, then a
single matmul for four gates, ``y = σ(f_l)·left + σ(f_r)·right + σ(i)·tanh(g)``. The state is one
vector (no separate memory cell). ``PaperTreeCell`` is that cell: not the Tree-LSTM of
``foldexp.models.cells``, so it lives here; the engine runs it in ``binary_tree``, the same
recursion as ``foldexp.models.tree_lstm.binary_tree_lstm``.

*Manual* batching is what a static graph can do for a batch of identical-shape trees, with the
structure fixed before timing starts:

- ``manual_level``: one embedding call for all leaves, then one cell call per tree level over
  every node of that level in every tree (children gathered with ``torch.cat`` of per-node
  slices) -- what we call manual batching, and the best case for batching by depth;
- ``manual_node``: the paper's own baseline, one op per tree node, batched across trees only.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import foldexp.blocks as fb
from foldexp.bench.trees import Levels
from foldexp.kernels import Linear, fused_cells_enabled
from foldexp.kernels.pointwise_graph import PointwiseFusion
from foldexp.models.tree_lstm import binary_tree

__all__ = [
    "PaperTreeCell",
    "PaperTreeModel",
    "leaf_words",
]


class PaperTreeCell(nn.Module):
    """The Fold benchmark's Tree-LSTM variant: ``(left, right) → state``, all of size ``n``."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.hidden = Linear(2 * n, n)
        self.gates = Linear(n, 4 * n)

    def forward(self, left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
        h0 = F.relu(self.hidden(torch.cat([left, right], dim=1)))
        fl, fr, i, g = self.gates(h0).chunk(4, dim=1)
        return (
            torch.sigmoid(fl) * left + torch.sigmoid(fr) * right + torch.sigmoid(i) * torch.tanh(g)
        )


class PaperTreeModel(nn.Module):
    """Shared parameters and the three ways of running them over a batch of trees.

    Args:
        vocab_size: rows of the leaf embedding (the paper: one per leaf position, i.e. 128).
        state_size: the state (and embedding) width ``n``.
    """

    def __init__(self, vocab_size: int, state_size: int) -> None:
        super().__init__()
        self.embedding = fb.Embedding(vocab_size, state_size)
        self.cell = PaperTreeCell(state_size)
        self._fusion = PointwiseFusion([self.cell])

    def _cell(self, left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
        """The cell as the engine runs it, its pointwise update one generated kernel wherever
        the engine's is (``kernels/pointwise_graph.py``): manual and dynamic batching then
        differ in the batching only."""
        if not fused_cells_enabled():
            return self.cell(left, right)
        return self._fusion(lambda a, b: [self.cell(a, b)], [left, right])[0]

    def block(self) -> fb.Block:
        """The engine's model: ``OneOf`` on arity over a recursive ``ForwardDeclaration``, a
        leaf's state its embedding."""
        leaf = fb.GetItem(0) >> fb.Scalar("int64") >> fb.Function(self.embedding)
        return binary_tree(leaf, self.cell)

    def manual_level(self, levels: Levels, words: torch.Tensor) -> torch.Tensor:
        """Roots' states; ``words`` is ``(leaf_count, batch)``, leaves left to right."""
        batch = words.shape[1]
        states = list(self.embedding(words.reshape(-1)).split(batch))
        cell = self._cell
        for level in levels.internal:
            left = torch.cat([states[a] for a, _ in level])
            right = torch.cat([states[b] for _, b in level])
            states.extend(cell(left, right).split(batch))
        return states[-1]

    def manual_node(self, levels: Levels, words: torch.Tensor) -> torch.Tensor:
        """The same with one call per node (each batched over the trees), as the paper did."""
        embed, cell = self.embedding, self._cell
        states = [embed(words[i]) for i in range(levels.leaf_count)]
        for level in levels.internal:
            for a, b in level:
                states.append(cell(states[a], states[b]))
        return states[-1]


def leaf_words(trees: list[Any]) -> torch.Tensor:
    """``(leaf_count, batch)`` word ids of identical-shape trees, leaves left to right."""
    cols = []
    for tree in trees:
        words: list[int] = []
        stack = [tree]
        while stack:
            node = stack.pop()
            if len(node) == 1:
                words.append(node[0])
            else:
                stack.append(node[1])
                stack.append(node[0])
        cols.append(words)
    return torch.from_numpy(np.asarray(cols, dtype=np.int64).T.copy())
