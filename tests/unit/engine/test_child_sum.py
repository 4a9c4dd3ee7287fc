"""The child-sum Tree-LSTM (``foldexp.models.child_sum``): batched == eager, values and gradients,
on trees whose nodes have 1 to 4 children, and both equal Tai et al.'s equations written out one
node at a time with the model's own weights; with and without words at internal nodes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import foldexp.blocks as fb
from foldexp.data.trees import Tree
from foldexp.data.vocab import Vocabulary
from foldexp.models.cells import (
    ChildForget,
    ChildSumCombine,
    TreeLSTMLeaf,
    WordChildForget,
    WordChildSumCombine,
)
from foldexp.models.child_sum import ChildSumTreeLSTMClassifier
from foldexp.models.tree_lstm import TreeLSTMClassifier
from foldexp.testing import check_block

WORDS = ["a", "good", "bad", "film", "not", "very", "+", "."]


def _random_tree(rng: np.random.Generator, depth: int, internal_words: bool) -> Tree:
    label = int(rng.integers(-1, 4))  # -1: some nodes carry no label
    if depth == 0 or rng.random() < 0.3:
        return Tree(label, word=str(rng.choice(WORDS)))
    arity = int(rng.integers(1, 5))  # unary chains and wide nodes alike
    kids = [_random_tree(rng, depth - 1, internal_words) for _ in range(arity)]
    word = str(rng.choice(WORDS)) if internal_words else None
    return Tree(label, word=word, children=kids)


def _trees(n: int, seed: int, internal_words: bool = False) -> list[Tree]:
    rng = np.random.default_rng(seed)
    return [_random_tree(rng, 3, internal_words) for _ in range(n)]


def _model(internal_words: bool = False, forget_bias: float = 0.0) -> ChildSumTreeLSTMClassifier:
    torch.manual_seed(0)
    vocab = Vocabulary(WORDS[:-1])  # "." is unknown: it maps to <unk>
    return ChildSumTreeLSTMClassifier(
        vocab,
        4,
        embed_size=5,
        hidden_size=3,
        internal_words=internal_words,
        forget_bias=forget_bias,
    ).eval()


def _one(model: torch.nn.Module, kind: type) -> torch.nn.Module:
    (module,) = [m for m in model.modules() if isinstance(m, kind)]
    return module


def _reference(model: ChildSumTreeLSTMClassifier, tree: Tree, internal_words: bool):
    """Root ``(h, c)`` by Tai et al. (2015) eqs. 2-8, one node at a time."""
    leaf = _one(model, TreeLSTMLeaf)
    n = leaf.hidden_size

    def x_of(node: Tree) -> torch.Tensor:
        return model.embedding(torch.tensor([model.vocab.index(node.word)]))

    def state(node: Tree):
        if not node.children:
            return leaf(x_of(node))
        kids = [state(k) for k in node.children]
        h_sum = sum(h for h, _ in kids)
        if internal_words:
            forget, combine = _one(model, WordChildForget), _one(model, WordChildSumCombine)
            (project,) = [
                m
                for m in model.modules()
                if isinstance(m, torch.nn.Linear) and m.out_features == 4 * n
            ]
            wx = project(x_of(node))
            wx_i, wx_o, wx_u, wx_f = wx.split(n, dim=1)
            u_i, u_o, u_u = combine.gates(h_sum).split(n, dim=1)
            i, o, u = wx_i + u_i, wx_o + u_o, wx_u + u_u
            f = [torch.sigmoid(forget.gate(h) + wx_f + forget.forget_bias) for h, _ in kids]
        else:
            forget, combine = _one(model, ChildForget), _one(model, ChildSumCombine)
            i, o, u = combine.gates(h_sum).split(n, dim=1)
            f = [torch.sigmoid(forget.gate(h)) for h, _ in kids]
        c = torch.sigmoid(i) * torch.tanh(u) + sum(fk * ck for fk, (_, ck) in zip(f, kids))
        return torch.sigmoid(o) * torch.tanh(c), c

    h, c = state(tree)
    return h[0], c[0]


@pytest.mark.parametrize("internal_words", [False, True])
def test_child_sum_matches_the_equations_node_by_node(internal_words: bool) -> None:
    model = _model(internal_words, forget_bias=0.5)
    trees = _trees(8, seed=1, internal_words=internal_words)
    assert {len(n.children) for t in trees for n in t.nodes()} >= {0, 1, 2, 3, 4}
    with torch.no_grad():
        expected = [_reference(model, t, internal_words)[0] for t in trees]
    check_block(model.compiler.root, trees, expected=expected)


@pytest.mark.parametrize("internal_words", [False, True])
def test_child_sum_batched_equals_eager_with_gradients(internal_words: bool) -> None:
    model = _model(internal_words)
    trees = _trees(12, seed=4, internal_words=internal_words)
    check_block(model.compiler.root, trees)  # values and gradients of every parameter


def test_child_sum_classifier_loss_and_gradients_batch_as_one_tree_at_a_time() -> None:
    model = _model().train()
    trees = _trees(10, seed=7)
    out = model(model.collate(trees))
    out["loss"].backward()
    batched = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    total = 0.0
    for tree in trees:  # the loss is summed over nodes / trees in the batch
        single = model(model.collate([tree]))
        (single["loss"] / len(trees)).backward()
        total += single["loss"].item() / len(trees)
    torch.testing.assert_close(out["loss"].item(), total, rtol=1e-5, atol=1e-6)
    for got, want in zip(batched, (p.grad for p in model.parameters())):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


def test_child_sum_predicts_root_probabilities() -> None:
    model = _model()
    trees = _trees(5, seed=2)
    with torch.no_grad():
        probs = model.predict(model.collate(trees))
    assert probs.shape == (5, 4)
    torch.testing.assert_close(probs.sum(1), torch.ones(5))
    assert model.prediction_columns() == ["p_0", "p_1", "p_2", "p_3"]


def test_binary_model_refuses_a_wider_node_by_name() -> None:
    model = TreeLSTMClassifier(Vocabulary(WORDS), 4, 5, 3)
    wide = Tree(1, children=[Tree(0, "a"), Tree(1, "good"), Tree(2, "film")])
    with pytest.raises(
        fb.InputError, match=r"per node, got a node with 3 \(model=child_sum_tree_lstm"
    ):
        model.collate([wide])
