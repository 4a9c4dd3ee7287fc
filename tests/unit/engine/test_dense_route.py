"""A user's plain ``nn.Linear`` inside an op takes the engine's dense route: same results."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import foldexp.blocks as fb
from foldexp.bench.trees import make_trees
from foldexp.kernels import MIN_ROWS, onednn_available, set_onednn_enabled
from foldexp.kernels import dense as dense_module
from foldexp.testing import check_block


class PlainCell(nn.Module):
    """A Tree-LSTM cell as a user writes it: ``nn.Linear`` and plain torch ops."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.gates = nn.Linear(2 * hidden, 5 * hidden)

    def forward(self, left: tuple, right: tuple) -> tuple[torch.Tensor, torch.Tensor]:
        i, fl, fr, o, u = self.gates(torch.cat([left[0], right[0]], 1)).chunk(5, 1)
        c = torch.sigmoid(i) * torch.tanh(u)
        c = c + torch.sigmoid(fl) * left[1] + torch.sigmoid(fr) * right[1]
        return torch.sigmoid(o) * torch.tanh(c), c


class PlainLeaf(nn.Module):
    def __init__(self, words: int, hidden: int) -> None:
        super().__init__()
        self.embed, self.gates = nn.Embedding(words, hidden), nn.Linear(hidden, 2 * hidden)

    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        i, u = self.gates(self.embed(ids)).chunk(2, 1)
        c = torch.sigmoid(i) * torch.tanh(u)
        return torch.tanh(c), c


def _tree_block(hidden: int) -> fb.Block:
    leaf, cell = PlainLeaf(30, hidden), PlainCell(hidden)
    tree = fb.ForwardDeclaration(name="tree")
    leaf_block = fb.GetItem(0) >> fb.Scalar("int64") >> fb.Function(leaf)
    pair = fb.AllOf(fb.GetItem(0) >> tree(), fb.GetItem(1) >> tree()) >> fb.Function(cell)
    tree.resolve_to(fb.OneOf(key_fn=len, case_blocks=[(1, leaf_block), (2, pair)]))
    return tree() >> fb.GetItem(0)


@pytest.mark.skipif(not onednn_available(), reason="torch built without oneDNN")
@pytest.mark.usefixtures("restore_onednn")
def test_plain_nn_linear_takes_the_route_batched_equals_eager(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = []
    real = dense_module._mm
    monkeypatch.setattr(dense_module, "_mm", lambda *a: calls.append(a[0].shape) or real(*a))
    set_onednn_enabled(True)
    torch.manual_seed(0)
    trees = make_trees(2 * MIN_ROWS, 6, 30, np.random.default_rng(0))
    check_block(_tree_block(8), trees, rtol=1e-4, atol=1e-5)
    assert calls, "no plain nn.Linear took the oneDNN route"
    calls.clear()
    set_onednn_enabled(False)
    check_block(_tree_block(8), trees[:3])
    assert not calls
