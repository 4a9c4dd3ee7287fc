"""The Tree-LSTM with a bidirectional leaf LSTM (``leaf_context_size``): batched == eager, values
and gradients, on trees of varied shape, and both equal a hand-written reference that runs
``nn.LSTMCell`` over the sentence and the cells over the tree one node at a time."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from foldexp.data.trees import Tree
from foldexp.data.vocab import Vocabulary
from foldexp.models.cells import BinaryTreeLSTMCell, TreeLSTMLeaf
from foldexp.models.tree_lstm import TreeLSTMClassifier
from foldexp.testing import check_block

WORDS = ["a", "good", "bad", "film", "not", "very", "."]


def _random_tree(rng: np.random.Generator, leaves: int) -> Tree:
    label = int(rng.integers(5))
    if leaves == 1:
        return Tree(label, word=str(rng.choice(WORDS)))
    k = int(rng.integers(1, leaves))
    return Tree(label, children=(_random_tree(rng, k), _random_tree(rng, leaves - k)))


def _trees(n: int = 9, seed: int = 0) -> list[Tree]:
    rng = np.random.default_rng(seed)
    return [_random_tree(rng, int(rng.integers(1, 9))) for _ in range(n)]


def _model(context: int = 3) -> TreeLSTMClassifier:
    torch.manual_seed(0)
    vocab = Vocabulary(WORDS[:-1])  # "." is unknown: it maps to <unk>
    return TreeLSTMClassifier(vocab, 5, 4, 5, leaf_context_size=context).eval()


def _reference(model: TreeLSTMClassifier, tree: Tree) -> torch.Tensor:
    """The root's h, one node at a time, from the model's own weights."""
    forward, backward = model.leaf_context_steps
    (leaf_cell,) = [m for m in model.modules() if isinstance(m, TreeLSTMLeaf)]
    (cell,) = [m for m in model.modules() if isinstance(m, BinaryTreeLSTMCell)]
    words = [model.vocab.index(leaf.word) for leaf in tree.leaves()]
    x = model.embedding(torch.tensor(words))
    size = forward.cell.hidden_size

    def run(step: torch.nn.Module, rows: torch.Tensor) -> list[torch.Tensor]:
        state = (torch.zeros(1, size), torch.zeros(1, size))
        out = []
        for row in rows:
            state = step.cell(row[None], state)
            out.append(state[0])
        return out

    fwd = run(forward, x)
    bwd = run(backward, x.flip(0))[::-1]
    context = iter([torch.cat([f, b], 1) for f, b in zip(fwd, bwd)])

    def state(node: Tree):
        if not node.children:
            return leaf_cell(next(context))
        left, right = (state(child) for child in node.children)
        return cell(left, right)

    return state(tree)[0][0]


def test_leaf_context_matches_a_node_at_a_time_reference() -> None:
    model = _model()
    trees = _trees()
    with torch.no_grad():
        expected = [_reference(model, t) for t in trees]
    check_block(model.compiler.root, trees, expected=expected)


def test_leaf_context_batched_equals_eager_with_gradients() -> None:
    model = _model(context=2)
    trees = _trees(12, seed=3)
    check_block(model.compiler.root, trees)  # values and gradients


def test_loss_is_the_same_batched_and_one_tree_at_a_time() -> None:
    model = _model()
    trees = _trees(10, seed=7)
    batched = model(model.collate(trees))
    singles = [model(model.collate([t])) for t in trees]
    torch.testing.assert_close(
        batched["loss"] * len(trees), sum(s["loss"] for s in singles), rtol=1e-5, atol=1e-5
    )
    assert int(batched["node_count"]) == sum(int(s["node_count"]) for s in singles)


def test_leaf_context_with_operator_words_fails_clearly() -> None:
    with pytest.raises(ValueError, match="leaf_context_size"):
        TreeLSTMClassifier(Vocabulary(WORDS), 5, 4, 5, leaf_context_size=3, internal_words=True)
