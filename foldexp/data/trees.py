"""The immutable :class:`Tree` used for every tree-shaped dataset (SST, calculator, synthetic).

A tree node has an integer ``label`` (a sentiment class, a calculator value or class, or
:data:`NO_LABEL` when the node carries none), an optional ``word`` (a leaf token, or the operator
symbol of a calculator node) and a tuple of ``children``. Trees are built once by the parsers and
generators and never mutated, so they can be shared between datasets, views and batches.

Every traversal is iterative rather than recursive: chain (left-deep) trees used in benchmarks can
be thousands of levels deep, far beyond Python's recursion limit.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

__all__ = ["NO_LABEL", "Tree", "gc_paused"]

#: Label of a node that carries no training signal (for example a neutral internal node in the
#: binary SST view, or a non-root node in a root-only view). Losses should skip it.
NO_LABEL = -1

_REPR_WIDTH = 60


class Tree:
    """An immutable, ordered tree node.

    Args:
        label: Integer label of this node (:data:`NO_LABEL` for none).
        word: Leaf token; for calculator trees also the operator symbol of internal nodes.
        children: Child subtrees, left to right. A node without children is a leaf.

    Example:
        >>> t = Tree(3, children=(Tree(2, "It"), Tree(4, "works")))
        >>> t.to_ptb()
        '(3 (2 It) (4 works))'
        >>> [leaf.word for leaf in t.leaves()], t.size(), t.depth()
        (['It', 'works'], 3, 1)
    """

    __slots__ = ("label", "word", "children")

    label: int
    word: str | None
    children: tuple[Tree, ...]

    def __init__(self, label: int, word: str | None = None, children: Iterable[Tree] = ()) -> None:
        children = tuple(children)
        for child in children:
            if not isinstance(child, Tree):
                raise TypeError(f"Tree children must be Tree, got {type(child).__name__}")
        if word is not None and not isinstance(word, str):
            raise TypeError(f"Tree word must be str or None, got {type(word).__name__}")
        _init(self, int(label), word, children)

    @classmethod
    def _make(cls, label: int, word: str | None, children: tuple[Tree, ...]) -> Tree:
        """Build a node without validation; for parsers and generators that already checked."""
        node = _new(cls)
        _init(node, label, word, children)
        return node

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Tree is immutable; use tree.replace({name}=...) for a new tree")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("Tree is immutable")

    def __reduce__(self):
        # Flat post-order lists rather than nested children: pickling stays iterative, so deep
        # chain trees pickle too (e.g. when a DataLoader worker sends them to the trainer).
        nodes = self.nodes()
        return (
            _rebuild,
            ([n.label for n in nodes], [n.word for n in nodes], [len(n.children) for n in nodes]),
        )

    def __copy__(self) -> Tree:
        return self

    def __deepcopy__(self, memo: dict) -> Tree:
        return self  # immutable: sharing is safe

    # ------------------------------------------------------------------ structure

    @property
    def is_leaf(self) -> bool:
        """Whether this node has no children."""
        return not self.children

    def leaves(self) -> list[Tree]:
        """Return the leaf nodes, left to right."""
        out: list[Tree] = []
        stack = [self]
        while stack:
            node = stack.pop()
            if node.children:
                stack.extend(reversed(node.children))
            else:
                out.append(node)
        return out

    def words(self) -> list[str | None]:
        """Return the words of the leaves, left to right (the sentence for SST trees)."""
        return [leaf.word for leaf in self.leaves()]

    def nodes(self) -> list[Tree]:
        """Return every node in post-order (children before parents, left to right)."""
        # Reversed pre-order with children pushed left to right is post-order; no recursion.
        out: list[Tree] = []
        stack = [self]
        while stack:
            node = stack.pop()
            out.append(node)
            stack.extend(node.children)
        out.reverse()
        return out

    def labels(self) -> list[int]:
        """Return the labels of all nodes in post-order (same order as :meth:`nodes`)."""
        return [node.label for node in self.nodes()]

    def depth(self) -> int:
        """Return the number of edges on the longest root-to-leaf path (a single leaf has 0)."""
        best = 0
        stack = [(self, 0)]
        while stack:
            node, d = stack.pop()
            if node.children:
                d += 1
                stack.extend((child, d) for child in node.children)
            elif d > best:
                best = d
        return best

    def size(self) -> int:
        """Return the number of nodes (internal and leaves)."""
        count = 0
        stack = [self]
        while stack:
            node = stack.pop()
            count += 1
            stack.extend(node.children)
        return count

    # ------------------------------------------------------------------ transformations

    def replace(self, **changes: object) -> Tree:
        """Return a copy of this node with some of ``label``, ``word``, ``children`` replaced."""
        unknown = set(changes) - {"label", "word", "children"}
        if unknown:
            raise TypeError(f"Tree.replace got unknown field(s): {', '.join(sorted(unknown))}")
        return Tree(
            changes.get("label", self.label),  # type: ignore[arg-type]
            changes.get("word", self.word),  # type: ignore[arg-type]
            changes.get("children", self.children),  # type: ignore[arg-type]
        )

    def map(self, fn: Callable[[Tree, tuple[Tree, ...]], tuple[int, str | None]]) -> Tree:
        """Rebuild the tree bottom-up with new labels and words.

        Args:
            fn: Called once per node (post-order) with the original node and its already rebuilt
                children; returns the new ``(label, word)`` for that node.

        Returns:
            A new tree of the same shape.
        """
        # Post-order with a value stack: a node's rebuilt children are the top len(children)
        # entries. No recursion (deep chains) and no per-node dict lookups (SST has 318k nodes).
        stack: list[Tree] = []
        make = Tree._make
        for node in self.nodes():
            arity = len(node.children)
            if arity:
                kids = tuple(stack[-arity:])
                del stack[-arity:]
            else:
                kids = ()
            label, word = fn(node, kids)
            stack.append(make(int(label), word, kids))
        return stack[0]

    def map_labels(self, fn: Callable[[int], int]) -> Tree:
        """Return a tree of the same shape and words with every label replaced by ``fn(label)``."""
        return self.map(lambda node, _kids: (fn(node.label), node.word))

    # ------------------------------------------------------------------ text form

    def to_ptb(self) -> str:
        """Return the PTB-style bracketed text, e.g. ``(3 (2 It) (4 works))``.

        Parentheses inside words are written as ``-LRB-``/``-RRB-`` (the PTB escapes) so the
        text always parses back. An internal node with a word (calculator operators) is written
        ``(label word child ...)``; read such text with ``parse_tree(..., internal_words=True)``.

        Raises:
            ValueError: A leaf has no word, or a word is empty or has surrounding whitespace
                (such a tree cannot be written in a form that parses back to itself).
        """
        parts: list[str] = []
        stack: list[Tree | str] = [self]
        while stack:
            item = stack.pop()
            if isinstance(item, str):
                parts.append(item)
                continue
            parts.append(f"({item.label}")
            word = item.word
            if word is not None:
                parts.append(" " + _escape_word(word))
            elif not item.children:
                raise ValueError(f"cannot write a leaf without a word as PTB: {item!r}")
            stack.append(")")
            for child in reversed(item.children):
                stack.append(child)
                stack.append(" ")
        return "".join(parts)

    # ------------------------------------------------------------------ comparison

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Tree):
            return NotImplemented
        stack = [(self, other)]
        while stack:
            a, b = stack.pop()
            if a is b:
                continue
            if a.label != b.label or a.word != b.word or len(a.children) != len(b.children):
                return False
            stack.extend(zip(a.children, b.children, strict=True))  # lengths checked above
        return True

    def __hash__(self) -> int:
        hashes: dict[int, int] = {}
        for node in self.nodes():
            kids = tuple(hashes[id(c)] for c in node.children)
            hashes[id(node)] = hash((node.label, node.word, kids))
        return hashes[id(self)]

    def __repr__(self) -> str:
        if not self.children:
            return f"Tree({self.label}, {self.word!r})"
        try:
            text = self.to_ptb()
        except ValueError:
            text = f"<{len(self.children)} children>"
        if len(text) > _REPR_WIDTH:
            text = text[: _REPR_WIDTH - 3] + "..."
        return f"<Tree size={self.size()} depth={self.depth()} {text}>"


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while building many (acyclic) trees.

    Building SST train allocates ~300k nodes, which triggers hundreds of young-generation
    collections that find nothing (trees hold no cycles); pausing them halves the load time.
    The previous state is restored on exit.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


_new = object.__new__
_set = object.__setattr__


def _init(node: Tree, label: int, word: str | None, children: tuple[Tree, ...]) -> None:
    # object.__setattr__ bypasses the immutability guard; only this module builds nodes.
    _set(node, "label", label)
    _set(node, "word", word)
    _set(node, "children", children)


def _rebuild(labels: list[int], words: list[str | None], arities: list[int]) -> Tree:
    """Inverse of ``Tree.__reduce__``: rebuild a tree from its post-order node lists."""
    stack: list[Tree] = []
    for label, word, arity in zip(labels, words, arities, strict=True):
        kids = tuple(stack[len(stack) - arity :]) if arity else ()
        if arity:
            del stack[len(stack) - arity :]
        stack.append(Tree._make(label, word, kids))
    (root,) = stack
    return root


_WS = " \t\r\n"


def _escape_word(word: str) -> str:
    if not word or word.strip(_WS) != word:
        raise ValueError(f"cannot write word {word!r} as PTB (empty or surrounding whitespace)")
    if "(" in word or ")" in word:
        word = word.replace("(", "-LRB-").replace(")", "-RRB-")
    return word
