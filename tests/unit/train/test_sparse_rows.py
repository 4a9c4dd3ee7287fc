"""Sparse gradients for embedding tables (``train/sparse_rows.py``): taken only where the update
is provably the same, and then the same to float rounding."""

from __future__ import annotations

from functools import partial

import pytest
import torch
from torch import nn

import foldexp.blocks as fb
from foldexp import Compiler
from foldexp.train.optim import build_optimizer
from foldexp.train.sparse_rows import use_sparse_table_gradients


class _Words(nn.Module):
    """A bag of words through a compiled block: a table in its own group, as the tree models
    put it."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.table = fb.Embedding(40, 6)
        self.compiler = Compiler(
            fb.Map(fb.Scalar("int64") >> fb.Function(self.table) >> fb.FC(4)) >> fb.Sum()
        )

    def groups(self, **table: float) -> list[dict]:
        rest = [p for p in self.parameters() if p is not self.table.weight]
        return [{"params": rest, "lr": 0.1}, {"params": [self.table.weight], "lr": 0.1, **table}]


def _train(model: _Words, optimizer, steps: int = 4) -> None:  # type: ignore[no-untyped-def]
    batches = [[[1, 2, 2, 7], [3], []], [[7, 7], [39, 0, 1]]] * (steps // 2)
    for batch in batches:
        optimizer.zero_grad()
        model.compiler(batch).pow(2).sum().backward()
        optimizer.step()


@pytest.mark.parametrize(
    "make",
    [
        lambda g: torch.optim.Adagrad(g, lr=0.1),
        lambda g: torch.optim.SGD(g, lr=0.1),
        lambda g: build_optimizer(partial(torch.optim.Adagrad, lr=0.1), g),  # fused, as trained
    ],
)
def test_a_table_takes_sparse_gradients_with_the_same_updates(make) -> None:  # type: ignore[no-untyped-def]
    dense, sparse = _Words(), _Words()
    _train(dense, make(dense.groups()))
    optimizer = make(sparse.groups())
    assert use_sparse_table_gradients(sparse, optimizer, 0.0, 1) == ["table"]
    assert sparse.table.sparse
    _train(sparse, optimizer)
    assert sparse.table.weight.grad is not None and sparse.table.weight.grad.is_sparse
    for a, b in zip(dense.parameters(), sparse.parameters()):
        torch.testing.assert_close(a, b)
    untouched = [i for i in range(40) if i not in (0, 1, 2, 3, 7, 39)]
    torch.testing.assert_close(sparse.table.weight[untouched], _Words().table.weight[untouched])


@pytest.mark.parametrize(
    "make, clip, world",
    [
        (lambda g: torch.optim.SGD(g, lr=0.1, momentum=0.9), 0.0, 1),  # momentum moves every row
        (lambda g: torch.optim.Adam(g, lr=0.1), 0.0, 1),
        (lambda g: torch.optim.Adagrad(g, lr=0.1, weight_decay=1e-4), 0.0, 1),
        (lambda g: torch.optim.Adagrad(g, lr=0.1), 1.0, 1),  # clipping has no sparse norm
        (lambda g: torch.optim.Adagrad(g, lr=0.1), 0.0, 2),  # DDP buckets dense gradients
        (lambda g: torch.optim.Adagrad(g[:1] + [{"params": []}], lr=0.1), 0.0, 1),  # not its
    ],
)
def test_the_dense_route_stays_where_the_update_would_change(make, clip, world) -> None:  # type: ignore[no-untyped-def]
    model = _Words()
    assert use_sparse_table_gradients(model, make(model.groups()), clip, world) == []
    assert not model.table.sparse


def test_a_table_in_a_fused_group_with_other_parameters_stays_dense() -> None:
    model = _Words()
    optimizer = torch.optim.Adagrad(model.parameters(), lr=0.1, fused=True)
    assert use_sparse_table_gradients(model, optimizer, 0.0, 1) == []
    unfused = torch.optim.Adagrad(model.parameters(), lr=0.1)
    assert use_sparse_table_gradients(model, unfused, 0.0, 1) == ["table"]


def test_frozen_tables_and_plain_nn_embeddings() -> None:
    model = nn.Sequential(nn.Embedding(5, 2), nn.Embedding(5, 2))
    model[1].weight.requires_grad_(False)
    optimizer = torch.optim.Adagrad([model[0].weight], lr=0.1)
    assert use_sparse_table_gradients(model, optimizer, 0.0, 1) == ["0"]
    assert model[0].sparse and not model[1].sparse


def test_a_table_off_the_cpu_stays_dense() -> None:
    # (meta stands for a GPU: torch's sparse step would coalesce there, making the host wait)
    model = _Words().to("meta")
    optimizer = torch.optim.Adagrad(model.groups(), lr=0.1)
    assert use_sparse_table_gradients(model, optimizer, 0.0, 1) == []
    assert not model.table.sparse
