"""Benchmark inputs: binary trees as nested tuples, and the level structure manual batching needs.

A leaf is ``(word_id,)`` and an internal node ``(left, right)`` -- the form
``foldexp.models.tree_lstm`` dispatches on with ``OneOf(len, ...)``. Shapes follow the Fold
benchmark (``random``: the left subtree gets ``j`` of ``k`` leaves, ``j`` uniform in ``1..k-1``;
``balanced``: halves; ``chain``: left-deep, a sequence). Everything is built iteratively, so chains
of thousands of leaves do not hit Python's recursion limit, and drawn from a seeded numpy
generator, so every process that asks for the same seed gets the same trees.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from foldexp.data.synthetic import split_plan

__all__ = [
    "SHAPES",
    "make_tree",
    "make_trees",
    "same_shape_trees",
    "tree_depth",
    "trees_digest",
    "Levels",
    "levels_of",
    "number_batch",
    "sentence_lengths",
]

SHAPES = ("random", "balanced", "chain")


def _split(shape: str, k: int, u: float) -> int:
    """Leaves of the left subtree of a node with ``k`` leaves."""
    if shape == "random":
        return 1 + int(u * (k - 1))
    if shape == "balanced":
        return (k + 1) // 2
    if shape == "chain":
        return k - 1
    raise ValueError(f"unknown tree shape {shape!r}; expected one of {', '.join(SHAPES)}")


def make_tree(n_leaves: int, vocab_size: int, rng: np.random.Generator, shape: str = "random"):
    """One tree with ``n_leaves`` leaves and word ids in ``[0, vocab_size)``."""
    if n_leaves < 1:
        raise ValueError(f"a tree needs at least one leaf, got {n_leaves}")
    words = rng.integers(vocab_size, size=n_leaves).tolist()
    u = rng.random(n_leaves).tolist()
    order = split_plan(n_leaves, lambda k, j: _split(shape, k, u[j]))
    built: list[Any] = []
    for k, first in reversed(order):
        if k == 1:
            built.append((words[first],))
        else:
            left = built.pop()
            right = built.pop()
            built.append((left, right))
    return built[0]


def make_trees(
    count: int,
    n_leaves: int,
    vocab_size: int,
    seed: int | np.random.Generator,
    shape: str = "random",
) -> list[Any]:
    """``count`` independently shaped trees (``shape="random"``: every shape differs)."""
    rng = np.random.default_rng(seed)
    return [make_tree(n_leaves, vocab_size, rng, shape) for _ in range(count)]


def _postorder(tree: Any) -> list[Any]:
    """Nodes children-first (left subtree, right subtree, node), without recursion."""
    out: list[Any] = []
    stack: list[tuple[Any, bool]] = [(tree, False)]
    while stack:
        node, done = stack.pop()
        if done or len(node) == 1:
            out.append(node)
        else:
            stack.append((node, True))
            stack.append((node[1], False))
            stack.append((node[0], False))
    return out


def same_shape_trees(template: Any, count: int, vocab_size: int, seed: int) -> list[Any]:
    """``count`` trees shaped exactly like ``template``, each with fresh words."""
    rng = np.random.default_rng(seed)
    nodes = _postorder(template)
    n_leaves = sum(1 for n in nodes if len(n) == 1)
    out = []
    for words in rng.integers(vocab_size, size=(count, n_leaves)).tolist():
        it = iter(words)
        built: list[Any] = []
        for node in nodes:
            if len(node) == 1:
                built.append((next(it),))
            else:
                right = built.pop()
                left = built.pop()
                built.append((left, right))
        out.append(built[0])
    return out


def tree_depth(tree: Any) -> int:
    """Edges on the longest root-to-leaf path (a leaf has depth 0)."""
    depth: dict[int, int] = {}
    for node in _postorder(tree):
        depth[id(node)] = 0 if len(node) == 1 else 1 + max(depth[id(c)] for c in node)
    return depth[id(tree)]


def trees_digest(trees: list[Any]) -> str:
    """A short fingerprint, so separate processes can show they timed the same trees."""
    return hashlib.sha1(repr(trees).encode()).hexdigest()[:12]


@dataclass
class Levels:
    """A tree shape as manual batching sees it: nodes numbered leaves first, then level by level.

    ``leaf_count`` leaves are nodes ``0..leaf_count-1`` (left to right); ``internal[d]`` lists,
    for level ``d + 1`` (height above the leaves), the ``(left, right)`` node numbers of its
    nodes, which are numbered consecutively after everything below them.
    """

    leaf_count: int
    internal: list[list[tuple[int, int]]]

    @property
    def depth(self) -> int:
        return len(self.internal)

    @property
    def num_nodes(self) -> int:
        return self.leaf_count + sum(len(level) for level in self.internal)


def levels_of(template: Any) -> Levels:
    """The level structure of one tree shape (computed once, like a static graph)."""
    nodes = _postorder(template)
    height: dict[int, int] = {}
    by_level: dict[int, list[Any]] = {}
    for node in nodes:
        h = 0 if len(node) == 1 else 1 + max(height[id(c)] for c in node)
        height[id(node)] = h
        by_level.setdefault(h, []).append(node)
    number: dict[int, int] = {}
    for node in by_level.get(0, []):
        number[id(node)] = len(number)
    internal = []
    for h in range(1, max(by_level) + 1):
        level = [(number[id(n[0])], number[id(n[1])]) for n in by_level[h]]
        for n in by_level[h]:
            number[id(n)] = len(number)
        internal.append(level)
    return Levels(len(by_level[0]), internal)


def sentence_lengths(
    count: int, mean: float, rng: np.random.Generator, low: int = 2, high: int = 60
) -> np.ndarray:
    """Sentence lengths with a treebank-like spread: gamma, shape 4.5, mean ``mean``, clipped.

    SST's training sentences average 19 words with a standard deviation near 9 (mean / sqrt(4.5)),
    skewed right; PTB's average 21, the DyNet tagger corpus 25.
    """
    shape = 4.5
    x = rng.gamma(shape, mean / shape, size=count)
    return np.clip(np.rint(x), low, high).astype(np.int64)


def number_batch(trees: list) -> tuple[list[int], list[list[tuple[int, int]]], list[int]]:
    """A batch of trees numbered for level-by-level batching: the leaves first (their words, in
    post-order), then each height's ``(left, right)`` pairs of node numbers, numbered
    consecutively after everything below them; and each tree's root. A node object met twice
    (shared between or within trees) gets a number each time."""
    height: dict[int, int] = {}
    words: list[int] = []
    by_height: list[list[Any]] = []
    number: dict[int, int] = {}
    for tree in trees:
        stack: list[tuple[Any, bool]] = [(tree, False)]
        while stack:  # children before parents
            node, ready = stack.pop()
            if len(node) == 1:
                height[id(node)], number[id(node)] = 0, len(words)
                words.append(node[0])
            elif not ready:
                stack += [(node, True), (node[1], False), (node[0], False)]
            else:
                h = 1 + max(height[id(node[0])], height[id(node[1])])
                height[id(node)] = h
                by_height += [[] for _ in range(h - len(by_height))]
                by_height[h - 1].append(node)
    pairs, at = [], len(words)
    for level in by_height:
        pairs.append([(number[id(n[0])], number[id(n[1])]) for n in level])
        for n in level:
            number[id(n)], at = at, at + 1
    return words, pairs, [number[id(t)] for t in trees]
