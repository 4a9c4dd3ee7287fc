"""Unit tests for generated data: calculator trees, synthetic shapes, sequence problems, splits."""

from __future__ import annotations

import math

import numpy as np
import pytest

from foldexp.data.calculator import (
    calculator_splits,
    evaluate,
    make_calculator_dataset,
    random_expression,
    relabel_expression,
)
from foldexp.data.ptb import parse_tree
from foldexp.data.sequences import (
    accuracy_within,
    addition_problem,
    multiplication_problem,
    pad_sequences,
)
from foldexp.data.splits import random_split, scaffold_split, split_sizes, take
from foldexp.data.synthetic import (
    balanced_tree,
    chain_tree,
    random_binary_tree,
    random_graph,
    random_sequences,
    random_trees,
    same_shape_batch,
)

# --------------------------------------------------------------------------- calculator


def test_calculator_is_deterministic():
    a = make_calculator_dataset(50, 4, seed=7)
    b = make_calculator_dataset(50, 4, seed=7)
    assert a == b
    assert a != make_calculator_dataset(50, 4, seed=8)


@pytest.mark.parametrize("max_depth", [1, 3, 5])
def test_calculator_labels_are_correct(max_depth):
    for tree in make_calculator_dataset(40, max_depth, seed=1, target="value"):
        assert 1 <= tree.depth() <= max_depth
        for node in tree.nodes():
            assert node.label == evaluate(node)
            if node.is_leaf:
                assert node.word in "0123456789" and len(node.word) == 1
            else:
                assert node.word in "+-*" and len(node.children) == 2
    for tree in make_calculator_dataset(40, max_depth, seed=1, target="mod", n_classes=7):
        assert all(node.label == evaluate(node) % 7 for node in tree.nodes())


def test_calculator_text_round_trip_and_relabel():
    tree = random_expression(np.random.default_rng(0), 4)
    text = tree.to_ptb()
    parsed = parse_tree(text, internal_words=True)
    assert parsed == tree
    assert relabel_expression(parsed, target="mod", n_classes=10).label == evaluate(tree) % 10
    assert evaluate(parse_tree("(0 - (0 2) (0 * (0 3) (0 4)))", internal_words=True)) == -10


def test_calculator_mod_target_defeats_bag_of_words():
    # Same multiset of digits and operators, different structure, different class.
    left = parse_tree("(0 * (0 - (0 2) (0 3)) (0 4))", internal_words=True)
    right = parse_tree("(0 - (0 2) (0 * (0 3) (0 4)))", internal_words=True)
    assert sorted(left.words()) == sorted(right.words())
    assert evaluate(left) % 10 != evaluate(right) % 10


def test_calculator_splits_are_distinct():
    train, dev, test = calculator_splits(200, 4, seed=0)
    assert (len(train), len(dev), len(test)) == (160, 20, 20)
    texts = [t.to_ptb() for t in train + dev + test]
    assert len(set(texts)) == 200
    with pytest.raises(ValueError, match="distinct expressions"):
        make_calculator_dataset(400, 1, seed=0, unique=True)  # only 300 exist


def test_calculator_argument_checks():
    with pytest.raises(ValueError, match="target"):
        make_calculator_dataset(1, 2, 0, target="bucket")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_depth"):
        random_expression(np.random.default_rng(0), -1)


# --------------------------------------------------------------------------- synthetic shapes


@pytest.mark.parametrize("n", [1, 2, 3, 7, 64, 100])
def test_shapes_have_exact_leaf_counts(n):
    for make in (random_binary_tree, balanced_tree, chain_tree):
        tree = make(n, 50, np.random.default_rng(n))
        leaves = tree.leaves()
        assert len(leaves) == n and tree.size() == 2 * n - 1
        assert all(0 <= int(leaf.word) < 50 for leaf in leaves)
        assert all(len(node.children) in (0, 2) for node in tree.nodes())
        assert all(0 <= label < 5 for label in tree.labels())
    assert balanced_tree(n, 5, 0).depth() == math.ceil(math.log2(n))
    assert chain_tree(n, 5, 0).depth() == n - 1
    if n > 1:
        assert chain_tree(n, 5, 0).children[1].is_leaf  # left-deep


def test_random_trees_are_deterministic_and_varied():
    assert random_binary_tree(64, 100, 3) == random_binary_tree(64, 100, 3)
    shapes = {random_binary_tree(12, 1, seed).to_ptb() for seed in range(30)}
    assert len(shapes) > 10  # vocab of 1 and labels aside, shapes differ
    trees = random_trees(20, (3, 9), 10, rng=0, shape="balanced")
    assert all(3 <= len(t.leaves()) <= 9 for t in trees)
    with pytest.raises(ValueError, match="shape"):
        random_trees(1, 3, 10, shape="star")


def test_same_shape_batch():
    template = random_binary_tree(16, 10, 0)
    batch = same_shape_batch(template, 8, 1000, rng=1)
    assert len(batch) == 8

    def shape(tree):
        return tree.map(lambda node, kids: (0, "w" if node.is_leaf else None))

    assert all(shape(t) == shape(template) for t in batch)
    assert len({tuple(t.words()) for t in batch}) == 8


def test_random_sequences_and_graphs():
    seqs = random_sequences(50, 2, 6, 11, rng=0)
    assert len(seqs) == 50 and {len(s) for s in seqs} <= set(range(2, 7))
    assert all(s.dtype == np.int64 and s.min() >= 0 and s.max() < 11 for s in seqs)
    graph = random_graph(12, rng=0, extra_edge_prob=0.2)
    assert graph.n_nodes == 12 and graph.edges.shape[1] == 2
    assert np.all(graph.edges[:, 0] < graph.edges[:, 1])
    # connected: union-find over the edges reaches one component
    parent = list(range(12))

    def find(i):
        while parent[i] != i:
            i = parent[i]
        return i

    for i, j in graph.edges.tolist():
        parent[find(i)] = find(j)
    assert len({find(i) for i in range(12)}) == 1


# --------------------------------------------------------------------------- sequences


def test_addition_and_multiplication_problems():
    examples = addition_problem(200, min_len=10, max_len=20, seed=0)
    for x, target in examples:
        assert x.dtype == np.float32 and x.shape[1] == 2 and 10 <= len(x) <= 20
        marked = np.flatnonzero(x[:, 1] == 1)
        assert len(marked) == 2 and set(np.unique(x[:, 1])) == {0.0, 1.0}
        assert marked[0] < len(x) // 2 <= marked[1]
        assert np.all((x[:, 0] >= 0) & (x[:, 0] <= 1))
        assert target == pytest.approx(x[marked, 0].sum(), abs=1e-6)
    lengths = {len(x) for x, _ in examples}
    assert min(lengths) == 10 and max(lengths) == 20
    products = multiplication_problem(20, 5, 5, seed=1)
    for x, target in products:
        marked = np.flatnonzero(x[:, 1])
        assert target == pytest.approx(float(np.prod(x[marked, 0])), abs=1e-6)
    assert addition_problem(5, seed=3)[0].target == addition_problem(5, seed=3)[0].target
    with pytest.raises(ValueError, match="min_len"):
        addition_problem(1, min_len=1, max_len=3)


def test_accuracy_within_and_padding():
    assert accuracy_within([0.5, 0.55, 1.0], [0.52, 0.5, 1.039]) == pytest.approx(2 / 3)
    assert accuracy_within(np.array([1.0]), [1.05], tol=0.1) == 1.0
    with pytest.raises(ValueError, match="size"):
        accuracy_within([1, 2], [1])
    padded, lengths = pad_sequences([np.ones((2, 2)), np.ones((3, 2))])
    assert padded.shape == (2, 3, 2) and lengths.tolist() == [2, 3]
    assert padded[0, 2].tolist() == [0, 0]


# --------------------------------------------------------------------------- splits


@pytest.mark.parametrize("n", [0, 1, 7, 10, 1128])
def test_random_split_is_a_partition(n):
    parts = random_split(n, (0.8, 0.1, 0.1), seed=0)
    joined = np.concatenate(parts)
    assert sorted(joined.tolist()) == list(range(n))
    assert [len(p) for p in parts] == list(split_sizes(n))
    again = random_split(n, seed=0)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again, strict=True))


def test_split_sizes_checks():
    assert split_sizes(10) == (8, 1, 1)
    assert sum(split_sizes(3, (0.5, 0.5, 0.0))) == 3
    with pytest.raises(ValueError, match="sum to 1"):
        split_sizes(10, (0.5, 0.2, 0.2))


def test_scaffold_split_keeps_scaffolds_together():
    smiles = (
        ["c1ccccc1C", "c1ccccc1O", "c1ccccc1N", "c1ccccc1CC", "c1ccccc1CCO", "c1ccccc1Cl"]
        + ["C1CCCCC1O", "C1CCCCC1N"]
        + ["CCO", "CCN"]
        + ["c1ccncc1"]
    )
    train, dev, test = scaffold_split(smiles, (0.6, 0.2, 0.2))
    joined = sorted(np.concatenate([train, dev, test]).tolist())
    assert joined == list(range(len(smiles)))
    assert train.tolist() == [0, 1, 2, 3, 4, 5]  # the largest scaffold group (benzene) first
    assert set(dev.tolist()) == {6, 7}
    assert take(smiles, test) == ["CCO", "CCN", "c1ccncc1"]
    assert scaffold_split(smiles, (0.6, 0.2, 0.2))[2].tolist() == test.tolist()
