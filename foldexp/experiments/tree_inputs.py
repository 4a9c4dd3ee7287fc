"""Lines of text as trees for ``foldexp predict`` over a tree model (``tree_inputs``).

A line is a labelled or unlabelled PTB tree (non-integer labels such as ``S``/``NP`` become -1),
or a bare sentence, which becomes a right-branching binary tree (a stand-in for a parse: the
model then reads the words right to left in nested pairs, which is how most English phrases
attach). A line that cannot be a tree gives the reason instead, never an exception.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from foldexp.data.ptb import parse_tree
from foldexp.data.trees import NO_LABEL, Tree
from foldexp.experiments.tree_files import WHITESPACE, collapse_unary_chains

__all__ = ["right_branching", "tree_inputs"]

# An opening parenthesis and the label after it (maybe empty, as in PTB's "( (S ...))").
_OPEN = re.compile(r"\(([ \t]*)([^\s()]*)")
_INTEGER = re.compile(r"[+-]?[0-9]+")


def _integer_labels(line: str) -> str:
    """``line`` with every non-integer label (``S``, ``NP``, an empty one) replaced by -1."""

    def label(match: re.Match[str]) -> str:
        space, text = match.groups()
        if _INTEGER.fullmatch(text):
            return match.group()
        if not text:
            return f"(-1 {space}"
        return f"({space}-1"

    return _OPEN.sub(label, line)


def right_branching(words: Sequence[str], label: int = NO_LABEL) -> Tree:
    """A binary tree over ``words``, each word paired with everything to its right:
    ``a b c`` → ``(a (b c))``; every node labelled ``label``."""
    tree = Tree(label, words[-1])
    for word in reversed(words[:-1]):
        tree = Tree(label, children=(Tree(label, word), tree))
    return tree


def _split_phrases(tree: Tree) -> Tree:
    """``tree`` with each leaf of several words (``(NP the cat)``) made a right-branching
    subtree of them, the leaf's label on top."""
    stack: list[Tree] = []
    for node in tree.nodes():  # post-order: a node's rebuilt children are on top of the stack
        arity = len(node.children)
        kids = tuple(stack[len(stack) - arity :]) if arity else ()
        if arity:
            del stack[len(stack) - arity :]
        words = node.word.split() if node.word is not None and not arity else []
        if len(words) > 1:
            stack.append(right_branching(words).replace(label=node.label))
        else:
            stack.append(Tree(node.label, node.word, kids))
    return stack[0]


def tree_inputs(
    lines: list[str],
    *,
    collapse_unary: bool = False,
    source: str = "<input>",
    numbers: Sequence[int] | None = None,
) -> list[tuple[Tree | None, str | None]]:
    """Each line as ``(tree, None)``, or ``(None, why)`` when it cannot be one; never raises.

    A line is a PTB tree, labelled or not, or a bare sentence (no parentheses), read as a
    right-branching binary tree of its whitespace-separated words. In a tree whose labels are
    not integers (``(S (NP the cat) (VP sat))``) every label becomes -1 and a leaf of several
    words becomes a right-branching subtree of them; integer-labelled trees are read as the
    training files are (an SST leaf such as ``(2 8 1/2)`` is one word). ``collapse_unary``: as
    ``dataset.collapse_unary`` of the run. ``source`` names the lines' file in parse errors,
    ``numbers`` their line numbers in it (by default, line ``k`` of ``lines`` is its line ``k``;
    ``foldexp predict`` reads a file a chunk at a time).
    """
    out: list[tuple[Tree | None, str | None]] = []
    for number, line in zip(numbers or range(1, len(lines) + 1), lines, strict=True):
        text = line.strip(WHITESPACE)
        try:
            if not text:
                out.append((None, "empty input"))
                continue
            if text.startswith("("):
                relabelled = _integer_labels(text)
                tree = parse_tree(relabelled, path=source, line=number)
                if relabelled != text:
                    tree = _split_phrases(tree)
            elif "(" in text or ")" in text:
                out.append((None, "a tree starts with '('; a sentence has no parentheses"))
                continue
            else:
                tree = right_branching(text.split())
            out.append((collapse_unary_chains(tree) if collapse_unary else tree, None))
        except (ValueError, RecursionError) as exc:  # TreeParseError is a ValueError
            out.append((None, str(exc)))
    return out
