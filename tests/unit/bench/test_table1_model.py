"""The Table 1 model: the two manual baselines and the engine compute the same roots, and the
tree helpers build the shapes they claim."""

from __future__ import annotations

import torch

from foldexp import Compiler
from foldexp.bench.table1_model import PaperTreeModel, leaf_words
from foldexp.bench.trees import (
    levels_of,
    make_tree,
    make_trees,
    same_shape_trees,
    sentence_lengths,
    tree_depth,
    trees_digest,
)


def _leaves(tree: tuple) -> int:
    return 1 if len(tree) == 1 else _leaves(tree[0]) + _leaves(tree[1])


def _shape(tree: tuple) -> object:
    return None if len(tree) == 1 else (_shape(tree[0]), _shape(tree[1]))


def test_shapes_have_the_claimed_sizes_and_depths(rng) -> None:
    for n in (1, 2, 7, 16):
        assert _leaves(make_tree(n, 10, rng, "random")) == n
    assert tree_depth(make_tree(16, 10, rng, "balanced")) == 4
    assert tree_depth(make_tree(16, 10, rng, "chain")) == 15
    chain = make_trees(1, 3000, 10, 0, "chain")[0]  # deep: built without recursion
    assert tree_depth(chain) == 2999


def test_same_seed_same_trees_and_same_shape_batches(rng) -> None:
    assert trees_digest(make_trees(4, 9, 10, 3)) == trees_digest(make_trees(4, 9, 10, 3))
    template = make_tree(12, 10, rng)
    batch = same_shape_trees(template, 5, 10, seed=1)
    assert {repr(_shape(t)) for t in batch} == {repr(_shape(template))}
    assert len({repr(t) for t in batch}) > 1  # fresh words


def test_levels_number_children_before_parents(rng) -> None:
    template = make_tree(20, 10, rng)
    lv = levels_of(template)
    assert lv.leaf_count == 20 and lv.num_nodes == 39 and lv.depth == tree_depth(template)
    seen = lv.leaf_count
    for level in lv.internal:
        assert all(a < seen and b < seen for a, b in level)
        seen += len(level)


def test_manual_level_manual_node_and_engine_agree(rng) -> None:
    model = PaperTreeModel(vocab_size=10, state_size=6)
    template = make_tree(9, 10, rng)
    trees = same_shape_trees(template, 4, 10, seed=2)
    lv, words = levels_of(template), leaf_words(trees)
    assert words.shape == (9, 4)
    engine = Compiler(model.block())(trees)
    torch.testing.assert_close(model.manual_level(lv, words), engine)
    torch.testing.assert_close(model.manual_node(lv, words), engine)


def test_sentence_lengths_have_the_asked_mean(rng) -> None:
    x = sentence_lengths(4000, 19.0, rng)
    assert x.min() >= 2 and x.max() <= 60 and abs(x.mean() - 19.0) < 1.0
