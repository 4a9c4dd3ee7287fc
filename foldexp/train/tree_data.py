"""Trees of one's own: PTB-format tree files as a dataset (``dataset=trees_ptb``); SST is a preset.

``trees_ptb`` reads one tree a line (``(label word)`` leaves, ``(label child child ...)`` nodes,
integer labels; ``-1`` marks a node without a label) from ``train.txt``/``dev.txt``/``test.txt``
in a folder, or from one file split at random. Labels are class ids ``0..K-1``: ``K`` is
``num_classes`` or, without it, the largest training label plus one. A label outside that range
fails naming the file and line. Optional relabelling makes graded or SST-like label sets fit:
``label_map`` (file label → class id, ``-1`` for none), ``drop_unscored_roots`` (trees whose root
ends up unlabelled or in a class never predicted are dropped), ``predict_classes``, ``polarity``.

SST is ``trees_ptb`` with those options (``sst_options``): the fine view is labels 0-4 as they
are; the binary view maps 0-1 → 0, 3-4 → 1 and neutral → unlabelled (or a third, never-predicted
class with ``neutral_nodes``), dropping trees with a neutral root.

Trees need not be binary: ``bundle.info["non_binary_tree"]`` says where the first tree with a
node of one or of three or more children is, and the binary Tree-LSTM refuses such a dataset
before training (the child-sum Tree-LSTM reads any arity). Unary chains, common in treebanks
(``(NP (NN cat))``), can instead be collapsed (``collapse_unary``): a node with one child becomes
that child, keeping the upper label (the lower one where the upper has none), so a root keeps
its label.

``tree_inputs`` turns lines of text into trees for ``foldexp predict``: labelled or unlabelled
PTB trees (non-integer labels such as ``S``/``NP`` become -1), or bare sentences, which become
right-branching binary trees (a stand-in for a parse: the model then reads the words right to
left in nested pairs, which is how most English phrases attach).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from foldexp.data.errors import FormatError
from foldexp.data.ptb import parse_tree, read_ptb_file
from foldexp.data.splits import random_split
from foldexp.data.trees import NO_LABEL, Tree, gc_paused
from foldexp.data.vocab import Vocabulary
from foldexp.train.datasets import DataBundle, _pretrained, _with_vector_words
from foldexp.validate import ConfigError, plain

__all__ = [
    "TreeSplits",
    "collapse_unary_chains",
    "load_tree_splits",
    "right_branching",
    "sst_options",
    "tree_inputs",
    "trees_ptb",
]

log = logging.getLogger(__name__)

SPLITS = ("train", "dev", "test")
_WS = " \t\r\n"

# SST's classes by view (class ids are positions); see ``sst_options``.
_SST_FINE = ["very_negative", "negative", "neutral", "positive", "very_positive"]
_SST_BINARY = ["negative", "positive"]


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
    trees = read_ptb_file(path)
    # read_ptb_file skips blank lines; number the rest the same way to locate each tree.
    text = path.read_bytes().decode("utf-8").removeprefix("\ufeff")
    numbers = [n for n, line in enumerate(text.split("\n"), start=1) if line.strip(_WS)]
    if len(numbers) != len(trees):  # the reader skipped other lines too: count trees instead
        return trees, [f"{path}: tree {k}" for k in range(1, len(trees) + 1)]
    return trees, [f"{path}:{n}" for n in numbers]


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
    """``num_classes``, or the largest training label + 1; checks every tree fits it."""
    given = num_classes is not None
    if num_classes is None:
        num_classes = max((max(t.labels()) for t in splits[0]), default=NO_LABEL) + 1
        if num_classes < 2:
            raise FormatError(
                f"the training trees' largest label is {num_classes - 1}; a classifier needs "
                "two classes at least (labels 0 and 1; -1 marks a node without a label)"
            )
    for trees, where in zip(splits, origins):
        for tree, at in zip(trees, where):
            top = max(tree.labels())
            if top >= num_classes:
                why = (
                    f"dataset.num_classes={num_classes}"
                    if given
                    else f"the training labels give {num_classes} classes "
                    f"(0..{num_classes - 1}); set dataset.num_classes if some are not in training"
                )
                label = f"label {top} (after dataset.label_map)" if mapped else f"label {top}"
                raise FormatError(f"{at}: {label}, but {why}")
    return num_classes


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


def _first_non_binary(splits: list[list[Tree]], origins: list[list[str]]) -> str | None:
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


# ---------------------------------------------------------------------- builders


def _polarity(polarity: Any, classes: int) -> list[list[int]] | None:
    """``dataset.polarity`` as two disjoint non-empty lists of predicted classes, or ``None``."""
    if polarity is None:
        return None
    groups = [sorted(int(c) for c in group) for group in polarity]
    flat = [c for g in groups for c in g]
    if len(groups) != 2 or not all(groups) or len(set(flat)) < len(flat):
        raise ConfigError(
            f"dataset.polarity={polarity}; expected [[negative classes], [positive classes]], "
            "two disjoint non-empty lists"
        )
    if not all(0 <= c < classes for c in flat):
        raise ConfigError(f"dataset.polarity={polarity}; classes must be in 0..{classes - 1}")
    return groups


def _class_names(names: list[str] | None, num_classes: int) -> list[str]:
    if names is None:
        return [str(k) for k in range(num_classes)]
    names = [str(n) for n in names]
    if len(names) != num_classes or len(set(names)) < len(names):
        raise ConfigError(
            f"dataset.class_names={names}; expected {num_classes} distinct names, one per class"
        )
    return names


def trees_ptb(
    path: str,
    name: str = "trees_ptb",
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
    polarity: list[list[int]] | None = None,
    class_names: list[str] | None = None,
    labels: str = "all",
    collapse_unary: bool = False,
    lowercase: bool = False,
    min_count: int = 1,
    word_vectors: str | None = None,
    vector_vocab: bool = False,
    limit: int = 0,
) -> DataBundle:
    """Labelled PTB trees of one's own (see the module docstring; keys as ``dataset.*``).

    ``bundle.info``: ``vocab``, ``num_classes``, ``predict_classes``, ``polarity``,
    ``class_names``, ``internal_words`` (False), ``embeddings`` (or ``None``) and
    ``non_binary_tree`` (where the first tree that is not binary is, or ``None``).
    """
    data = load_tree_splits(
        path,
        train_file,
        dev_file,
        test_file,
        split,
        fractions,
        seed,
        num_classes,
        label_map,
        drop_unscored_roots,
        predict_classes,
        labels,
        collapse_unary,
        limit,
    )
    train, dev, test = data.trees
    vocab = Vocabulary.from_trees(train, lowercase=lowercase, min_count=min_count)
    if word_vectors and vector_vocab:
        vocab = _with_vector_words(vocab, word_vectors, [dev, test])
    non_binary = _first_non_binary(data.trees, data.origins)
    if non_binary:
        log.info("%s: not all trees are binary: %s", name, non_binary)
    return DataBundle(
        train,
        dev,
        test,
        {
            "vocab": vocab,
            "num_classes": data.num_classes,
            "predict_classes": data.predict_classes,
            "polarity": _polarity(polarity, data.predict_classes),
            "class_names": _class_names(class_names, data.num_classes),
            "internal_words": False,
            "embeddings": _pretrained(word_vectors, vocab),
            "non_binary_tree": non_binary,
        },
    )


def sst_options(view: str, neutral_nodes: bool) -> dict[str, Any]:
    """The ``trees_ptb`` options that make SST's fine or binary view (``datasets.sst``).

    Binary: 0-1 → negative, 3-4 → positive, neutral → no label (or, with ``neutral_nodes``, a
    third class that trains but is never predicted, as Tai et al. 2015), neutral-root trees
    dropped. Fine: the five labels as they are, plus TF Fold's negative-vs-positive score.
    """
    view = str(plain(view))
    if view == "binary":
        return {
            "num_classes": 3 if neutral_nodes else 2,
            "label_map": [0, 0, 2 if neutral_nodes else NO_LABEL, 1, 1],
            "drop_unscored_roots": True,
            "predict_classes": 2,
            "polarity": None,
            "class_names": _SST_BINARY + ["neutral"] * neutral_nodes,
        }
    if view != "fine":
        raise ConfigError(f"dataset.view={view!r}; expected fine or binary")
    return {
        "num_classes": 5,
        "label_map": [0, 1, 2, 3, 4],  # checks every label is 0..4
        "drop_unscored_roots": False,
        "predict_classes": 5,
        "polarity": [[0, 1], [3, 4]],
        "class_names": list(_SST_FINE),
    }


# ---------------------------------------------------------------------- prediction inputs

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
    lines: list[str], *, collapse_unary: bool = False
) -> list[tuple[Tree | None, str | None]]:
    """Each line as ``(tree, None)``, or ``(None, why)`` when it cannot be one; never raises.

    A line is a PTB tree, labelled or not, or a bare sentence (no parentheses), read as a
    right-branching binary tree of its whitespace-separated words. In a tree whose labels are
    not integers (``(S (NP the cat) (VP sat))``) every label becomes -1 and a leaf of several
    words becomes a right-branching subtree of them; integer-labelled trees are read as the
    training files are (an SST leaf such as ``(2 8 1/2)`` is one word). ``collapse_unary``: as
    ``dataset.collapse_unary`` of the run.
    """
    out: list[tuple[Tree | None, str | None]] = []
    for number, line in enumerate(lines, start=1):
        text = line.strip(_WS)
        try:
            if not text:
                out.append((None, "empty input"))
                continue
            if text.startswith("("):
                relabelled = _integer_labels(text)
                tree = parse_tree(relabelled, path="<input>", line=number)
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
