"""Synthetic arithmetic expression trees (the "calculator" example of TensorFlow Fold).

A leaf is a digit 0-9 (``word`` = the digit, e.g. ``"7"``); an internal node applies a binary
operator ``+``, ``-`` or ``*`` (``word`` = the operator) to its two children. Every node is
labelled, so models can be trained on all nodes as with SST:

* ``target="value"``: the label is the integer value of the node's subexpression (regression).
  Values grow quickly with depth because of ``*``; keep ``max_depth`` small (<= 4) or predict a
  transformed value.
* ``target="mod"`` (default): the label is that value modulo ``n_classes`` (classification,
  0 .. n_classes-1). This is a good test of a *tree* model: ``(a op b) mod m`` is a function of
  ``a mod m`` and ``b mod m``, so a tree network can compute it exactly bottom-up with
  ``n_classes`` states per node, while a bag of words cannot -- the same multiset of digits and
  operators arranged differently has different values (``(2-3)*4`` vs ``2-(3*4)``).

Generation is deterministic given the seed (a numpy ``Generator``), so datasets are reproducible.
Depth counts edges: a single digit has depth 0.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from foldexp.data.splits import split_sizes
from foldexp.data.trees import NO_LABEL, Tree

__all__ = [
    "OPERATORS",
    "calculator_splits",
    "evaluate",
    "make_calculator_dataset",
    "parse_expression",
    "random_expression",
    "relabel_expression",
]

OPERATORS = ("+", "-", "*")
_DIGITS = tuple(str(d) for d in range(10))
_MAX_DEPTH_LIMIT = 200  # generation is recursive; deeper trees would also have absurd values

Target = Literal["value", "mod"]


def random_expression(rng: np.random.Generator, max_depth: int, *, leaf_prob: float = 0.3) -> Tree:
    """Draw one random expression tree labelled with its values.

    Args:
        rng: Source of randomness.
        max_depth: Maximum depth (edges); nodes at this depth are digits. The root is an
            operator whenever ``max_depth > 0``, so trees are never a lone digit.
        leaf_prob: Probability that a non-root node above ``max_depth`` is a digit.

    Returns:
        A tree whose every label is the integer value of its subexpression.
    """
    if not 0 <= max_depth <= _MAX_DEPTH_LIMIT:
        raise ValueError(f"max_depth must be in 0..{_MAX_DEPTH_LIMIT}, got {max_depth}")
    if not 0.0 <= leaf_prob <= 1.0:
        raise ValueError(f"leaf_prob must be a probability, got {leaf_prob}")
    make = Tree._make

    def grow(depth: int) -> Tree:
        if depth == max_depth or (depth > 0 and rng.random() < leaf_prob):
            digit = int(rng.integers(10))
            return make(digit, _DIGITS[digit], ())
        op = OPERATORS[int(rng.integers(3))]
        left = grow(depth + 1)
        right = grow(depth + 1)
        return make(_apply(op, left.label, right.label), op, (left, right))

    return grow(0)


def _apply(op: str | None, a: int, b: int) -> int:
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    raise ValueError(f"unknown calculator operator {op!r}; expected one of {OPERATORS}")


def _check_target(target: str, n_classes: int) -> None:
    if target not in ("value", "mod"):
        raise ValueError(f"unknown calculator target {target!r}; expected 'value' or 'mod'")
    if target == "mod" and n_classes < 2:
        raise ValueError(f"n_classes must be at least 2, got {n_classes}")


def evaluate(tree: Tree) -> int:
    """Compute the value of an expression tree from its words (labels are ignored)."""
    values: dict[int, int] = {}
    for node in tree.nodes():
        if node.is_leaf:
            digits = (node.word or "").removeprefix("-")
            if not (digits.isascii() and digits.isdigit()):
                raise ValueError(f"calculator leaf must hold an integer, got {node.word!r}")
            values[id(node)] = int(node.word)
        elif len(node.children) != 2:
            raise ValueError(f"calculator operator needs 2 operands, got {len(node.children)}")
        else:
            left, right = node.children
            values[id(node)] = _apply(node.word, values[id(left)], values[id(right)])
    return values[id(tree)]


def relabel_expression(tree: Tree, *, target: Target = "mod", n_classes: int = 10) -> Tree:
    """Recompute every label of an expression tree for the given target (see module docstring).

    Useful to switch a dataset between regression and classification, or to label trees read
    from text with ``parse_tree(..., internal_words=True)``.
    """
    _check_target(target, n_classes)
    built: dict[int, tuple[int, Tree]] = {}  # id(original) -> (value, new node)
    for node in tree.nodes():
        if node.is_leaf:
            value = evaluate(node)
            kids: tuple[Tree, ...] = ()
        else:
            pairs = [built[id(c)] for c in node.children]
            if len(pairs) != 2:
                raise ValueError(f"calculator operator needs 2 operands, got {len(pairs)}")
            value = _apply(node.word, pairs[0][0], pairs[1][0])
            kids = tuple(p[1] for p in pairs)
        label = value % n_classes if target == "mod" else value
        built[id(node)] = (value, Tree._make(label, node.word, kids))
    return built[id(tree)][1]


def make_calculator_dataset(
    n: int,
    max_depth: int,
    seed: int,
    *,
    target: Target = "mod",
    n_classes: int = 10,
    leaf_prob: float = 0.3,
    unique: bool = False,
) -> list[Tree]:
    """Generate ``n`` random expression trees.

    Args:
        n: Number of trees.
        max_depth: Maximum tree depth (edges).
        seed: Seed of the numpy generator; the same arguments always give the same trees.
        target: ``"mod"`` (label = value mod ``n_classes``) or ``"value"`` (label = value).
        n_classes: Number of classes for ``target="mod"``.
        leaf_prob: Probability that a non-root node above ``max_depth`` is a digit.
        unique: Reject repeated expressions, so no two returned trees are equal.

    Returns:
        The trees, every node labelled according to ``target``.

    Raises:
        ValueError: ``unique=True`` and there are too few distinct expressions of this depth.
    """
    if n < 0:
        raise ValueError(f"n must be non-negative, got {n}")
    _check_target(target, n_classes)
    rng = np.random.default_rng(seed)
    trees: list[Tree] = []
    seen: set[str] = set()
    attempts = 0
    max_attempts = 50 * n + 1000
    while len(trees) < n:
        attempts += 1
        if attempts > max_attempts:
            raise ValueError(
                f"found only {len(trees)} distinct expressions of depth <= {max_depth} in "
                f"{max_attempts} draws; ask for fewer trees or a larger max_depth"
            )
        tree = random_expression(rng, max_depth, leaf_prob=leaf_prob)
        if unique:
            key = tree.to_ptb()
            if key in seen:
                continue
            seen.add(key)
        if target == "mod":
            tree = tree.map_labels(lambda value: value % n_classes)
        trees.append(tree)
    return trees


def calculator_splits(
    n: int,
    max_depth: int,
    seed: int,
    *,
    fractions: tuple[float, float, float] = (0.8, 0.1, 0.1),
    **options,
) -> tuple[list[Tree], list[Tree], list[Tree]]:
    """Generate ``n`` distinct expressions and split them into train/dev/test.

    Expressions are distinct across the three splits, so test accuracy measures generalisation
    to unseen expressions rather than memorisation. ``options`` go to
    :func:`make_calculator_dataset` (``target``, ``n_classes``, ``leaf_prob``).
    """
    trees = make_calculator_dataset(n, max_depth, seed, unique=True, **options)
    n_train, n_dev, _ = split_sizes(n, fractions)
    # Draws are i.i.d., so consecutive slices are already a random split.
    return trees[:n_train], trees[n_train : n_train + n_dev], trees[n_train + n_dev :]


def parse_expression(text: str) -> Tree:
    """An infix expression of digits, ``+``, ``-``, ``*`` and parentheses (``(2+3)*4``) as an
    unlabelled calculator tree: ``*`` binds tighter, operators of one precedence group to the
    left, as in Python.

    Raises:
        ValueError: naming the character and its position where the text is no such expression
            (a number of several digits, a unary minus, an unbalanced parenthesis).
    """
    tokens = [(i, ch) for i, ch in enumerate(text) if not ch.isspace()]
    pos = 0

    def fail(why: str) -> ValueError:
        where = (
            f"at character {tokens[pos][0] + 1} ({tokens[pos][1]!r})"
            if pos < len(tokens)
            else "at the end"
        )
        return ValueError(f"not a calculator expression: {why} {where} of {text!r}")

    def operand() -> Tree:
        nonlocal pos
        if pos < len(tokens) and tokens[pos][1] == "(":
            pos += 1
            inner = sum_of_products()
            if pos >= len(tokens) or tokens[pos][1] != ")":
                raise fail("expected ')'")
            pos += 1
            return inner
        if pos < len(tokens) and tokens[pos][1] in _DIGITS:
            pos += 1
            if pos < len(tokens) and tokens[pos][1] in _DIGITS:
                raise fail("numbers are single digits 0-9")
            return Tree(NO_LABEL, tokens[pos - 1][1])
        raise fail("expected a digit or '('")

    def chain(operators: str, item: Any) -> Tree:
        nonlocal pos
        left = item()
        while pos < len(tokens) and tokens[pos][1] in operators:
            op = tokens[pos][1]
            pos += 1
            left = Tree(NO_LABEL, op, (left, item()))
        return left

    def sum_of_products() -> Tree:
        return chain("+-", lambda: chain("*", operand))

    try:
        tree = sum_of_products()
    except RecursionError:  # a few hundred nested parentheses: this input's error, no other's
        raise ValueError(
            f"not a calculator expression: parentheses nested too deep in {text[:40]!r}… "
            f"({len(text):,} characters)"
        ) from None
    if pos != len(tokens):
        raise fail("unexpected")
    return tree
