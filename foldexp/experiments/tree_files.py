"""PTB-format tree files read into checked, relabelled train/dev/test splits (``trees_ptb``).

``load_tree_splits`` reads one tree a line from ``train.txt``/``dev.txt``/``test.txt`` in a
folder, or from one file split at random (UTF-8, plain or gzipped: ``foldexp.data.textfile``),
remembering each tree's ``FILE:LINE`` so that a bad label fails naming where it is. Labels are
class ids ``0..K-1`` (``-1``: a node without a label); ``K`` is ``num_classes`` or, without it,
the largest training label + 1, and then every class below ``K`` must label some node (a 9 among
labels 0-4 is a typo, named by its line, not a ten-class model); ``label_map`` relabels,
``drop_unscored_roots`` drops trees whose root has no predicted class, ``labels=root`` keeps the
root labels alone, and ``collapse_unary`` merges unary chains (``collapse_unary_chains``). The
dataset builders over these splits are in ``tree_data``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from foldexp.config import MAX_CLASSES
from foldexp.config import enum_value as plain
from foldexp.config.errors import ConfigError
from foldexp.data.errors import FormatError
from foldexp.data.ptb import read_numbered_ptb_file
from foldexp.data.splits import random_split
from foldexp.data.trees import NO_LABEL, Tree, gc_paused

__all__ = ["SPLITS", "TreeSplits", "collapse_unary_chains", "first_non_binary", "load_tree_splits"]

SPLITS = ("train", "dev", "test")
WHITESPACE = " \t\r\n"


@dataclass
class TreeSplits:
    """The train, dev and test trees, where each came from (``FILE:LINE``), and the classes."""

    trees: list[list[Tree]]
    origins: list[list[str]]
    num_classes: int
    predict_classes: int


# ---------------------------------------------------------------------- reading


def _read(path: Path, key: str) -> tuple[list[Tree], list[str]]:
    """The trees of one file and their ``FILE:LINE`` origins."""
    if not path.is_file():
        raise FileNotFoundError(f"{key}: {path} does not exist (expected one PTB tree a line)")
    numbered = read_numbered_ptb_file(path)
    return [tree for _, tree in numbered], [f"{path}:{line}" for line, _ in numbered]


def _split_files(
    path: str, split: str, names: Sequence[str], fractions: Sequence[float], seed: int
) -> tuple[list[list[Tree]], list[list[str]]]:
    """The three splits: the files in folder ``path``, or file ``path`` split at random."""
    if path in ("", "???"):
        raise ConfigError(
            "dataset.path is not set: give the folder holding train.txt, dev.txt and test.txt "
            "(dataset.path=DIR), or one tree file with dataset.split=random"
        )
    root = Path(path).expanduser()
    if split == "random":
        if not root.is_file():
            raise ConfigError(
                f"dataset.path={path}: dataset.split=random splits one tree file, and this is "
                "not a file (for a folder of train/dev/test files use dataset.split=files)"
            )
        trees, origins = _read(root, "dataset.path")
        if abs(sum(fractions) - 1.0) > 1e-6 or len(fractions) != 3:
            raise ConfigError(
                f"dataset.fractions={list(fractions)}; expected three shares that sum to 1"
            )
        parts = random_split(len(trees), tuple(fractions), seed=seed)
        return [[trees[i] for i in p] for p in parts], [[origins[i] for i in p] for p in parts]
    if root.is_file():
        raise ConfigError(
            f"dataset.path={path} is one file: split it with dataset.split=random "
            "(dataset.fractions, dataset.seed), or give a folder holding "
            f"{', '.join(names)}"
        )
    if not root.is_dir():
        raise FileNotFoundError(f"dataset.path={path} does not exist")
    read = [_read(root / name, f"dataset.{s}_file") for s, name in zip(SPLITS, names)]
    return [t for t, _ in read], [o for _, o in read]


# ---------------------------------------------------------------------- labels


def _labels_ok(
    trees: list[Tree], origins: list[str], label_map: list[int] | None, num_classes: int | None
) -> None:
    """Fails naming the file and line of the first label the options cannot take."""
    for tree, where in zip(trees, origins):
        labels = tree.labels()
        low, high = min(labels), max(labels)  # the checks below depend on these alone
        if low < NO_LABEL:
            raise FormatError(
                f"{where}: label {low}; labels are class ids 0, 1, ... or -1 for a node "
                "without a label"
            )
        if label_map is None and high >= MAX_CLASSES:  # logits and output layer grow with it
            raise FormatError(
                f"{where}: label {high}; class ids go up to {MAX_CLASSES - 1} (labels are "
                "class ids 0, 1, ... or -1 for a node without a label)"
            )
        if label_map is not None and high >= len(label_map):
            raise FormatError(
                f"{where}: label {high} has no entry in dataset.label_map, which maps "
                f"0..{len(label_map) - 1}"
            )
        if label_map is None and num_classes is not None and high >= num_classes:
            raise FormatError(
                f"{where}: label {high}, but dataset.num_classes={num_classes} "
                f"(class ids 0..{num_classes - 1})"
            )


def _relabel(trees: list[Tree], label_map: list[int] | None) -> list[Tree]:
    """Every label through ``label_map`` (``-1`` stays ``-1``)."""
    if label_map is None or label_map == list(range(len(label_map))):
        return trees  # nothing changes: keep the parsed trees (and the time)
    table = {**dict(enumerate(label_map)), NO_LABEL: NO_LABEL}
    return [t.map_labels(table.__getitem__) for t in trees]


def _infer_classes(
    splits: list[list[Tree]], origins: list[list[str]], num_classes: int | None, mapped: bool
) -> int:
    """``num_classes``, or the largest training label + 1; checks every tree fits it.

    An inferred count must be used whole: without ``num_classes`` (and without ``label_map``,
    which declares the classes itself) every class ``0..K-1`` must label some node, so that one
    mistyped label (a 9 among labels 0-4) fails naming its line instead of widening the model
    to ten classes, five of which never occur.
    """
    given = num_classes is not None
    if num_classes is None and not splits[0]:  # the classes come from its labels
        sizes = ", ".join(f"{name} {len(trees)}" for name, trees in zip(SPLITS, splits))
        raise ConfigError(
            f"the train split is empty ({sizes}); check dataset.limit, the split fractions or "
            "the files"
        )
    if num_classes is None:
        num_classes = max((max(t.labels()) for t in splits[0]), default=NO_LABEL) + 1
        if num_classes < 2:
            raise FormatError(
                f"the training trees' largest label is {num_classes - 1}; a classifier needs "
                "two classes at least (labels 0 and 1; -1 marks a node without a label)"
            )
    present: set[int] = set()
    for trees, where in zip(splits, origins):
        for tree, at in zip(trees, where):
            labels = tree.labels()
            top = max(labels)
            if top >= num_classes:
                why = (
                    f"dataset.num_classes={num_classes}"
                    if given
                    else f"the training labels give {num_classes} classes "
                    f"(0..{num_classes - 1}); set dataset.num_classes if some are not in training"
                )
                label = f"label {top} (after dataset.label_map)" if mapped else f"label {top}"
                raise FormatError(f"{at}: {label}, but {why}")
            if not given and not mapped:
                present.update(labels)
    if not given and not mapped:
        _no_empty_class(splits, origins, num_classes, present)
    return num_classes


def _no_empty_class(
    splits: list[list[Tree]], origins: list[list[str]], num_classes: int, present: set[int]
) -> None:
    """Fails when a class below the inferred count labels no node, naming the first line that
    holds the largest label (the one that set the count)."""
    empty = [k for k in range(num_classes) if k not in present]
    if not empty:
        return
    top = num_classes - 1
    at = next(a for t, a in zip(splits[0], origins[0]) if max(t.labels()) == top)
    if empty == [0]:  # labels counted from 1
        shifted = ",".join(str(k) for k in range(-1, top))
        fix = (
            f"Labels counted from 1? Renumber them from 0 with dataset.label_map=[{shifted}] "
            f"(or set dataset.num_classes={num_classes} if class 0 is real but absent)"
        )
    else:
        fix = (
            "A mistyped label? Fix it; or, if those classes are real but absent, set "
            f"dataset.num_classes={num_classes}; or renumber the labels with dataset.label_map"
        )
    raise FormatError(
        f"{at}: label {top} makes {num_classes} classes (dataset.num_classes is not set), but "
        f"no node in any split has label {_ranges(empty)}: the labels are "
        f"{_ranges(sorted(present - {NO_LABEL}))}. {fix}"
    )


def _ranges(values: list[int]) -> str:
    """Sorted integers written short: ``0..4, 9``."""
    runs: list[list[int]] = []
    for v in values:
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    return ", ".join(
        str(a) if a == b else f"{a}, {b}" if b == a + 1 else f"{a}..{b}" for a, b in runs
    )


def _root_only(tree: Tree) -> Tree:
    """The tree with every label but the root's removed (sentence-level training)."""
    return tree.map(lambda node, _kids: (node.label if node is tree else NO_LABEL, node.word))


def collapse_unary_chains(tree: Tree) -> Tree:
    """``tree`` with every node of one child merged into that child, keeping the upper node's
    label (the lower one's where the upper has none): ``(3 (2 (1 a)))`` becomes ``(3 a)``."""
    stack: list[Tree] = []
    for node in tree.nodes():  # post-order: a node's rebuilt children are on top of the stack
        arity = len(node.children)
        kids = tuple(stack[len(stack) - arity :]) if arity else ()
        if arity:
            del stack[len(stack) - arity :]
        if arity == 1:
            (kid,) = kids
            label = node.label if node.label != NO_LABEL else kid.label
            stack.append(Tree(label, kid.word, kid.children))
        else:
            stack.append(Tree(node.label, node.word, kids))
    return stack[0]


def first_non_binary(splits: list[list[Tree]], origins: list[list[str]]) -> str | None:
    """``FILE:LINE has a node with N children`` for the first such tree, or ``None``."""
    for trees, where in zip(splits, origins):
        for tree, at in zip(trees, where):
            stack = [tree]
            while stack:
                kids = stack.pop().children
                if len(kids) == 1:
                    return f"{at} has a node with 1 child (dataset.collapse_unary=true merges it)"
                if len(kids) > 2:
                    return f"{at} has a node with {len(kids)} children"
                stack.extend(kids)
    return None


def load_tree_splits(
    path: str,
    train_file: str = "train.txt",
    dev_file: str = "dev.txt",
    test_file: str = "test.txt",
    split: str = "files",
    fractions: Sequence[float] = (0.8, 0.1, 0.1),
    seed: int = 0,
    num_classes: int | None = None,
    label_map: list[int] | None = None,
    drop_unscored_roots: bool = False,
    predict_classes: int | None = None,
    labels: str = "all",
    collapse_unary: bool = False,
    limit: int = 0,
) -> TreeSplits:
    """The three splits of a tree dataset, relabelled, filtered and checked (``trees_ptb``)."""
    with gc_paused():  # hundreds of thousands of acyclic nodes: nothing for the collector to find
        return _load_tree_splits(
            path,
            (train_file, dev_file, test_file),
            str(plain(split)),
            fractions,
            seed,
            num_classes,
            None if label_map is None else [int(c) for c in label_map],
            drop_unscored_roots,
            predict_classes,
            str(plain(labels)),
            collapse_unary,
            limit,
        )


def _load_tree_splits(
    path: str,
    names: tuple[str, str, str],
    split: str,
    fractions: Sequence[float],
    seed: int,
    num_classes: int | None,
    label_map: list[int] | None,
    drop_unscored_roots: bool,
    predict_classes: int | None,
    labels: str,
    collapse_unary: bool,
    limit: int,
) -> TreeSplits:
    splits, origins = _split_files(path, split, names, fractions, seed)
    for trees, where in zip(splits, origins):
        _labels_ok(trees, where, label_map, num_classes)
    splits = [_relabel(trees, label_map) for trees in splits]
    num_classes = _infer_classes(splits, origins, num_classes, label_map is not None)
    predict = predict_classes or num_classes
    if not 2 <= predict <= num_classes:
        raise ConfigError(f"dataset.predict_classes={predict_classes}; expected 2..{num_classes}")
    if collapse_unary:
        splits = [[collapse_unary_chains(t) for t in trees] for trees in splits]
    if drop_unscored_roots:
        keep = [[0 <= t.label < predict for t in trees] for trees in splits]
        splits = [[t for t, k in zip(ts, ks) if k] for ts, ks in zip(splits, keep)]
        origins = [[o for o, k in zip(os_, ks) if k] for os_, ks in zip(origins, keep)]
    if labels == "root":
        splits = [[_root_only(t) for t in trees] for trees in splits]
    if limit:
        splits, origins = [s[:limit] for s in splits], [o[:limit] for o in origins]
    return TreeSplits(splits, origins, num_classes, predict)
