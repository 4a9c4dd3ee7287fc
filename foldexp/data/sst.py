"""The Stanford Sentiment Treebank (Socher et al., EMNLP 2013): loading and label views.

Files are the official PTB-style ``train.txt``/``dev.txt``/``test.txt`` (one binarised tree per
line, every node labelled 0-4: very negative .. very positive) under ``DATA_DIR/sst/``.

Views:

* ``view="fine"``: the five classes as they are in the file.
* ``view="binary"``: trees whose *root* is neutral (2) are dropped (the standard binary task:
  6920 / 872 / 1821 trees); labels 0-1 become 0 and 3-4 become 1; neutral internal nodes keep
  :data:`~foldexp.data.trees.NO_LABEL` (-1) so an all-node loss can skip them.
* ``view="binary", neutral_nodes=True``: as above, but neutral internal nodes keep a third
  label, :data:`NEUTRAL` (2), as Tai et al. (2015) trained their binary model: three classes at
  the nodes, while the roots (never neutral) are scored negative-or-positive only.
* ``labels="root"``: every non-root label is replaced by ``NO_LABEL`` (sentence-level training);
  ``labels="all"`` keeps the phrase labels of every node.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from foldexp.data.errors import DatasetNotFoundError, TreeParseError
from foldexp.data.paths import resolve_data_dir
from foldexp.data.ptb import read_ptb_file
from foldexp.data.textfile import read_text
from foldexp.data.trees import NO_LABEL, Tree, gc_paused

__all__ = [
    "SST_CLASSES",
    "SST_SIZES",
    "SST_SPLITS",
    "NEUTRAL",
    "binary_label",
    "label_counts",
    "load_sst",
    "read_sst_file",
    "root_only",
    "sst_path",
    "to_binary",
]

SST_SPLITS = ("train", "dev", "test")
#: Number of trees per split in the official release.
SST_SIZES = {"train": 8544, "dev": 1101, "test": 2210}
#: Number of classes per view.
SST_CLASSES = {"fine": 5, "binary": 2}
#: The label of a neutral phrase in the binary view with ``neutral_nodes`` (a third class).
NEUTRAL = 2

View = Literal["fine", "binary"]
Labels = Literal["all", "root"]

# Fine label -> binary label; neutral (2) has no binary label.
_BINARY = (0, 0, NO_LABEL, 1, 1)
# The same with neutral kept as a third class (``neutral_nodes``).
_BINARY_NEUTRAL = (0, 0, NEUTRAL, 1, 1)


def sst_path(split: str, data_dir: str | os.PathLike[str] | None = None) -> Path:
    """Return the path of an SST split file: ``DATA_DIR/sst/{split}.txt``."""
    if split not in SST_SPLITS:
        raise ValueError(f"unknown SST split {split!r}; expected one of {', '.join(SST_SPLITS)}")
    return resolve_data_dir(data_dir) / "sst" / f"{split}.txt"


def read_sst_file(path: str | os.PathLike[str], *, unescape: bool = False) -> list[Tree]:
    """Parse an SST tree file, checking that every label is in 0..4 and every tree is binary.

    Args:
        path: A file with one PTB-style tree per line.
        unescape: Turn ``-LRB-``/``-RRB-``/``\\/``/``\\*`` into ``(``/``)``/``/``/``*``; by
            default tokens are kept exactly as written in the file.

    Raises:
        TreeParseError: The file is empty, not UTF-8, a line is malformed, or a node has one or
            more than two children (the models combine exactly two; such a tree would only fail
            in training).
    """
    trees = read_ptb_file(path, label_range=(0, 4), unescape=unescape)
    for index, tree in enumerate(trees):
        if not _is_binary(tree):
            raise _non_binary_error(Path(path), index)
    return trees


def _is_binary(tree: Tree) -> bool:
    """Whether every internal node has exactly two children (iterative: trees can be deep)."""
    stack = [tree]
    while stack:
        kids = stack.pop().children
        if kids:
            if len(kids) != 2:
                return False
            stack += kids
    return True


def _non_binary_error(path: Path, index: int) -> TreeParseError:
    """The error for the ``index``-th tree of ``path``, at the first node without two children.

    Only built when a file is refused, so it may read the file again: blank lines carry no tree
    (as in :func:`read_ptb_file`), and PTB words hold no parentheses, so the parentheses alone
    give the node's column.
    """
    text = read_text(path)
    lines = [(n, line) for n, line in enumerate(text.split("\n"), start=1) if line.strip(" \t\r\n")]
    number, line = lines[index]
    open_nodes: list[list[int]] = []  # [column of its '(', children so far]
    for column, char in enumerate(line, start=1):
        if char == "(":
            if open_nodes:
                open_nodes[-1][1] += 1
            open_nodes.append([column, 0])
        elif char == ")" and open_nodes:
            start, children = open_nodes.pop()
            if children not in (0, 2):
                return TreeParseError(
                    path,
                    number,
                    start,
                    f"expected a binary tree (each node a word or exactly two children), got a "
                    f"node with {children} {'child' if children == 1 else 'children'}",
                )
    return TreeParseError(path, number, 1, "expected a binary tree")  # not reached


def load_sst(
    split: str,
    data_dir: str | os.PathLike[str] | None = None,
    *,
    view: View = "fine",
    labels: Labels = "all",
    unescape: bool = False,
    neutral_nodes: bool = False,
) -> list[Tree]:
    """Load one split of the Stanford Sentiment Treebank.

    Args:
        split: ``"train"``, ``"dev"`` or ``"test"``.
        data_dir: Data root holding ``sst/``; default :func:`~foldexp.data.paths.data_root`.
        view: ``"fine"`` (5 classes) or ``"binary"`` (2 classes, neutral-root trees dropped).
        labels: ``"all"`` keeps every node's label, ``"root"`` only the root's.
        unescape: Replace PTB escapes in tokens (see :func:`read_sst_file`).
        neutral_nodes: In the binary view, neutral internal nodes are labelled :data:`NEUTRAL`
            instead of ``NO_LABEL``, a third class to train on (Tai et al. 2015). The fine view
            has neutral as one of its five classes either way.

    Returns:
        The trees in file order.

    Raises:
        DatasetNotFoundError: The split file is missing; the message says how to get it.
        TreeParseError: The file is malformed.
    """
    if view not in SST_CLASSES:
        raise ValueError(f"unknown SST view {view!r}; expected 'fine' or 'binary'")
    if labels not in ("all", "root"):
        raise ValueError(f"unknown SST labels {labels!r}; expected 'all' or 'root'")
    path = sst_path(split, data_dir)
    if not path.is_file():
        raise DatasetNotFoundError(
            f"SST {split} split not found: {path} does not exist. Get it with "
            "`foldexp data fetch sst` (needs internet) or `foldexp data import sst PATH` "
            "(PATH = trainDevTestTrees_PTB.zip or a folder with train/dev/test.txt); "
            "the data directory is FOLDEXP_DATA or ./data, or the one given: "
            "foldexp train paths.data_dir=DIR, foldexp data --data-dir DIR."
        )
    trees = read_sst_file(path, unescape=unescape)
    if view == "fine" and labels == "all":
        return trees
    with gc_paused():
        if view == "binary":
            binary = (to_binary(t, neutral_nodes=neutral_nodes) for t in trees)
            trees = [b for b in binary if b is not None]
        if labels == "root":
            trees = [root_only(t) for t in trees]
    return trees


def binary_label(label: int) -> int:
    """Map a fine label 0-4 to the binary label: 0-1 -> 0, 3-4 -> 1, 2 -> ``NO_LABEL``."""
    if label == NO_LABEL:
        return NO_LABEL
    if not 0 <= label <= 4:
        raise ValueError(f"expected an SST label in 0..4, got {label}")
    return _BINARY[label]


def to_binary(tree: Tree, *, neutral_nodes: bool = False) -> Tree | None:
    """Return the binary-view tree, or ``None`` when the root is neutral (2).

    Neutral internal nodes get ``NO_LABEL``, or :data:`NEUTRAL` with ``neutral_nodes``.
    """
    if tree.label == 2:
        return None
    for label in tree.labels():
        if not 0 <= label <= 4:
            raise ValueError(f"expected SST labels in 0..4, got {label} in {tree!r}")
    table = _BINARY_NEUTRAL if neutral_nodes else _BINARY
    return _relabel(tree, lambda label, is_root: table[label])


def root_only(tree: Tree) -> Tree:
    """Return the tree with every label except the root's replaced by ``NO_LABEL``."""
    return _relabel(tree, lambda label, is_root: label if is_root else NO_LABEL)


def _relabel(tree: Tree, new_label) -> Tree:
    """Rebuild ``tree`` with ``new_label(label, is_root)`` on every node."""
    return tree.map(lambda node, _kids: (new_label(node.label, node is tree), node.word))


def label_counts(trees: Iterable[Tree], *, nodes: Labels = "root") -> Counter[int]:
    """Count labels over the roots (``nodes="root"``) or over every node (``"all"``)."""
    if nodes == "root":
        return Counter(t.label for t in trees)
    return Counter(label for t in trees for label in t.labels())
