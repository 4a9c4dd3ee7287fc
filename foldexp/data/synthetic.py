"""Random shapes for tests and benchmarks: trees, sequences and small graphs.

Everything is drawn from a numpy ``Generator`` (pass a seed or a generator as ``rng``), so a
benchmark run is reproducible. Tree leaves carry a random word id in ``[0, vocab_size)`` written
as a decimal string (``Tree.word`` is text; ``int(leaf.word)`` recovers the id) and every node a
random label in ``[0, n_classes)``.

Shapes (depth counts edges, a leaf has depth 0):

* :func:`random_binary_tree`: each internal node with ``k`` leaves splits them into
  ``(j, k - j)`` with ``j`` uniform in ``1..k-1``;
* :func:`balanced_tree`: splits ``k`` into ``ceil(k/2), floor(k/2)``: depth ``ceil(log2 n)``;
* :func:`chain_tree`: left-deep ``((((w0 w1) w2) w3) ...)``: depth ``n - 1``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from foldexp.data.trees import Tree

__all__ = [
    "split_plan",
    "Graph",
    "balanced_tree",
    "chain_tree",
    "random_binary_tree",
    "random_graph",
    "random_sequences",
    "random_trees",
    "same_shape_batch",
]

RngLike = np.random.Generator | int | None

# Cache of str(i) for word ids: converting ints to text dominates tree generation otherwise.
_ID_TEXT: list[str] = [str(i) for i in range(4096)]


def _id_text(ids: np.ndarray) -> list[str]:
    top = int(ids.max()) if ids.size else 0
    if top >= len(_ID_TEXT):
        _ID_TEXT.extend(str(i) for i in range(len(_ID_TEXT), top + 1))
    table = _ID_TEXT
    return [table[i] for i in ids.tolist()]


def split_plan(n_leaves: int, split: Callable[[int, int], int]) -> list[tuple[int, int]]:
    """A binary tree's shape, without recursion: ``(leaf count, first leaf)`` of every node in
    pre-order (node, left subtree, right subtree); reversed, children come before parents.

    ``split(k, j)`` gives the leaves of the left subtree of the ``j``-th internal node (counted
    in pre-order), which has ``k`` leaves, so a split function can use pre-drawn randoms.
    """
    order: list[tuple[int, int]] = []
    stack = [(n_leaves, 0)]
    internal = 0
    while stack:
        k, first = stack.pop()
        order.append((k, first))
        if k > 1:
            left = split(k, internal)
            internal += 1
            stack.append((k - left, first + left))
            stack.append((left, first))
    return order


def _build(
    n_leaves: int,
    vocab_size: int,
    rng: RngLike,
    n_classes: int,
    split: Callable[[int, int], int],
) -> Tree:
    """Build a binary tree with ``n_leaves`` leaves; ``split(k, j)`` sizes the left subtree.

    ``j`` counts internal nodes in pre-order, so a split function can use pre-drawn randoms.
    """
    if n_leaves < 1:
        raise ValueError(f"a tree needs at least one leaf, got n_leaves={n_leaves}")
    if vocab_size < 1 or n_classes < 1:
        raise ValueError(
            f"vocab_size and n_classes must be positive, got {vocab_size}, {n_classes}"
        )
    rng = np.random.default_rng(rng)
    words = _id_text(rng.integers(vocab_size, size=n_leaves))
    labels = rng.integers(n_classes, size=2 * n_leaves - 1).tolist()
    order = split_plan(n_leaves, split)
    # Pass 2, reversed pre-order: right subtree, then left, then the node -- children first.
    make = Tree._make
    built: list[Tree] = []
    for i in range(len(order) - 1, -1, -1):
        k, first = order[i]
        if k == 1:
            built.append(make(labels[i], words[first], ()))
        else:
            left = built.pop()
            right = built.pop()
            built.append(make(labels[i], None, (left, right)))
    return built[0]


def random_binary_tree(
    n_leaves: int, vocab_size: int, rng: RngLike = None, *, n_classes: int = 5
) -> Tree:
    """Return a binary tree with exactly ``n_leaves`` leaves and uniformly random splits."""
    rng = np.random.default_rng(rng)
    u = rng.random(max(n_leaves - 1, 0)).tolist()
    return _build(n_leaves, vocab_size, rng, n_classes, lambda k, j: 1 + int(u[j] * (k - 1)))


def balanced_tree(
    n_leaves: int, vocab_size: int, rng: RngLike = None, *, n_classes: int = 5
) -> Tree:
    """Return the balanced binary tree with ``n_leaves`` leaves (depth ``ceil(log2 n)``)."""
    return _build(n_leaves, vocab_size, rng, n_classes, lambda k, _j: (k + 1) // 2)


def chain_tree(n_leaves: int, vocab_size: int, rng: RngLike = None, *, n_classes: int = 5) -> Tree:
    """Return the left-deep chain ``((w0 w1) w2) ...`` with ``n_leaves`` leaves."""
    return _build(n_leaves, vocab_size, rng, n_classes, lambda k, _j: k - 1)


_SHAPES = {"random": random_binary_tree, "balanced": balanced_tree, "chain": chain_tree}


def random_trees(
    count: int,
    n_leaves: int | tuple[int, int],
    vocab_size: int,
    rng: RngLike = None,
    *,
    shape: str = "random",
    n_classes: int = 5,
) -> list[Tree]:
    """Return ``count`` trees of one shape family.

    Args:
        count: Number of trees.
        n_leaves: Leaves per tree, or an inclusive ``(low, high)`` range drawn per tree.
        vocab_size: Word ids are drawn from ``[0, vocab_size)``.
        rng: Seed or generator.
        shape: ``"random"``, ``"balanced"`` or ``"chain"``.
        n_classes: Labels are drawn from ``[0, n_classes)``.
    """
    if shape not in _SHAPES:
        raise ValueError(f"unknown tree shape {shape!r}; expected one of {', '.join(_SHAPES)}")
    rng = np.random.default_rng(rng)
    if isinstance(n_leaves, tuple):
        low, high = n_leaves
        sizes = rng.integers(low, high + 1, size=count).tolist()
    else:
        sizes = [n_leaves] * count
    make = _SHAPES[shape]
    return [make(k, vocab_size, rng, n_classes=n_classes) for k in sizes]


def same_shape_batch(
    template: Tree, batch_size: int, vocab_size: int, rng: RngLike = None, *, n_classes: int = 5
) -> list[Tree]:
    """Return ``batch_size`` trees shaped exactly like ``template`` with fresh words and labels."""
    rng = np.random.default_rng(rng)
    nodes = template.nodes()
    n_leaves = sum(1 for node in nodes if node.is_leaf)
    make = Tree._make
    batch = []
    for _ in range(batch_size):
        words = iter(_id_text(rng.integers(vocab_size, size=n_leaves)))
        labels = iter(rng.integers(n_classes, size=len(nodes)).tolist())
        built: dict[int, Tree] = {}
        for node in nodes:  # post-order: leaves get words left to right
            kids = tuple(built[id(c)] for c in node.children)
            word = next(words) if not kids else None
            built[id(node)] = make(next(labels), word, kids)
        batch.append(built[id(template)])
    return batch


def random_sequences(
    count: int, min_len: int, max_len: int, vocab_size: int, rng: RngLike = None
) -> list[np.ndarray]:
    """Return ``count`` int64 arrays of word ids with lengths uniform in ``[min_len, max_len]``."""
    if not 0 <= min_len <= max_len:
        raise ValueError(f"need 0 <= min_len <= max_len, got {min_len}, {max_len}")
    rng = np.random.default_rng(rng)
    lengths = rng.integers(min_len, max_len + 1, size=count)
    flat = rng.integers(vocab_size, size=int(lengths.sum()))
    return np.split(flat.astype(np.int64), np.cumsum(lengths)[:-1])


class Graph(NamedTuple):
    """A small undirected graph.

    Attributes:
        node_types: ``(n,)`` int64 node type ids in ``[0, n_node_types)``.
        edges: ``(E, 2)`` int64 pairs ``i < j``, each undirected edge once, sorted.
    """

    node_types: np.ndarray
    edges: np.ndarray

    @property
    def n_nodes(self) -> int:
        """Number of nodes."""
        return len(self.node_types)


def random_graph(
    n_nodes: int,
    rng: RngLike = None,
    *,
    n_node_types: int = 8,
    extra_edge_prob: float = 0.1,
) -> Graph:
    """Return a connected random graph (molecule-sized by default).

    A random spanning tree (node ``i > 0`` joins a uniformly chosen earlier node) guarantees
    connectivity; every other pair is then joined with probability ``extra_edge_prob``.
    """
    if n_nodes < 1:
        raise ValueError(f"a graph needs at least one node, got n_nodes={n_nodes}")
    rng = np.random.default_rng(rng)
    types = rng.integers(n_node_types, size=n_nodes).astype(np.int64)
    adjacency = np.zeros((n_nodes, n_nodes), dtype=bool)
    for i in range(1, n_nodes):
        adjacency[int(rng.integers(i)), i] = True
    extra = np.triu(rng.random((n_nodes, n_nodes)) < extra_edge_prob, k=1)
    adjacency |= extra
    edges = np.argwhere(adjacency).astype(np.int64)  # row-major: already sorted, i < j
    return Graph(types, edges.reshape(-1, 2))
