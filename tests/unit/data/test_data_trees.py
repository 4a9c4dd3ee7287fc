"""Unit tests for the immutable Tree: structure queries, immutability, equality, PTB output."""

from __future__ import annotations

import copy
import pickle

import pytest

from foldexp.data.synthetic import chain_tree
from foldexp.data.trees import NO_LABEL, Tree


def sample() -> Tree:
    # (3 (2 It) (4 (2 is) (4 good)))
    return Tree(3, children=(Tree(2, "It"), Tree(4, children=(Tree(2, "is"), Tree(4, "good")))))


def test_structure_queries():
    t = sample()
    assert not t.is_leaf
    assert t.children[0].is_leaf
    assert [leaf.word for leaf in t.leaves()] == ["It", "is", "good"]
    assert t.words() == ["It", "is", "good"]
    assert t.size() == 5
    assert t.depth() == 2
    assert Tree(1, "x").depth() == 0
    # post-order: children before parents, left to right
    assert [(n.label, n.word) for n in t.nodes()] == [
        (2, "It"),
        (2, "is"),
        (4, "good"),
        (4, None),
        (3, None),
    ]
    assert t.labels() == [2, 2, 4, 4, 3]


def test_immutable():
    t = sample()
    with pytest.raises(AttributeError, match="immutable"):
        t.label = 1  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del t.word
    with pytest.raises(AttributeError):
        t.extra = 1  # type: ignore[attr-defined]
    assert t.replace(label=0).label == 0 and t.label == 3


def test_constructor_checks_types():
    with pytest.raises(TypeError, match="children must be Tree"):
        Tree(1, None, ["x"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="word must be str"):
        Tree(1, 5)  # type: ignore[arg-type]


def test_equality_hash_pickle_copy():
    a, b = sample(), sample()
    assert a == b and hash(a) == hash(b)
    assert a != a.replace(label=1)
    assert a != a.replace(word="w")
    assert len({a, b}) == 1
    assert pickle.loads(pickle.dumps(a)) == a
    assert copy.deepcopy(a) is a


def test_to_ptb_and_escaping():
    assert sample().to_ptb() == "(3 (2 It) (4 (2 is) (4 good)))"
    assert Tree(2, "(").to_ptb() == "(2 -LRB-)"
    assert Tree(5, "+", (Tree(1, "1"), Tree(4, "4"))).to_ptb() == "(5 + (1 1) (4 4))"
    with pytest.raises(ValueError, match="leaf without a word"):
        Tree(1).to_ptb()
    with pytest.raises(ValueError, match="whitespace"):
        Tree(1, " a").to_ptb()


def test_map_labels():
    t = sample().map_labels(lambda label: NO_LABEL if label == 2 else label)
    assert t.labels() == [NO_LABEL, NO_LABEL, 4, 4, 3]
    assert t.words() == sample().words()


def test_deep_chain_has_no_recursion_limit():
    t = chain_tree(5000, vocab_size=10, rng=0)
    assert t.depth() == 4999
    assert t.size() == 9999
    assert len(t.leaves()) == 5000
    assert t == chain_tree(5000, vocab_size=10, rng=0)
    assert hash(t) == hash(chain_tree(5000, vocab_size=10, rng=0))
    assert t.to_ptb().count("(") == 9999
    assert "depth=4999" in repr(t)


def test_repr():
    assert repr(Tree(2, "It")) == "Tree(2, 'It')"
    assert repr(sample()).startswith("<Tree size=5 depth=2 (3 (2 It)")


def test_pickle_deep_tree():
    t = chain_tree(3000, vocab_size=7, rng=1)
    assert pickle.loads(pickle.dumps(t)) == t
