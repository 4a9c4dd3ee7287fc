"""Trees of one's own: PTB-format tree files as a dataset (``dataset=trees_ptb``); SST is a preset.

``trees_ptb`` reads one tree a line (``(label word)`` leaves, ``(label child child ...)`` nodes,
integer labels; ``-1`` marks a node without a label) from ``train.txt``/``dev.txt``/``test.txt``
in a folder, or from one file split at random. Labels are class ids ``0..K-1``: ``K`` is
``num_classes`` or, without it, the largest training label plus one (logged; every class below
it must then label some node, so a mistyped 9 among labels 0-4 fails naming its line). A label
outside that range fails naming the file and line. Optional relabelling makes graded or
SST-like label sets fit: ``label_map`` (file label → class id, ``-1`` for none),
``drop_unscored_roots`` (trees whose root ends up unlabelled or in a class never predicted are
dropped), ``predict_classes``, ``polarity``.

SST is ``trees_ptb`` with those options (``sst_options``): the fine view is labels 0-4 as they
are; the binary view maps 0-1 → 0, 3-4 → 1 and neutral → unlabelled (or a third, never-predicted
class with ``neutral_nodes``), dropping trees with a neutral root.

Trees need not be binary: ``bundle.info["non_binary_tree"]`` says where the first tree with a
node of one or of three or more children is, and the binary Tree-LSTM refuses such a dataset
before training (the child-sum Tree-LSTM reads any arity). Unary chains, common in treebanks
(``(NP (NN cat))``), can instead be collapsed (``collapse_unary``): a node with one child becomes
that child, keeping the upper label (the lower one where the upper has none), so a root keeps
its label.

Reading and relabelling the files is ``tree_files``; lines of text as trees for ``foldexp
predict`` are ``tree_inputs``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from foldexp.config import enum_value as plain
from foldexp.config.errors import ConfigError
from foldexp.data.trees import NO_LABEL
from foldexp.data.vocab import Vocabulary
from foldexp.experiments.datasets import DataBundle, _pretrained, _with_vector_words
from foldexp.experiments.tree_files import first_non_binary, load_tree_splits

__all__ = ["sst_options", "trees_ptb"]

log = logging.getLogger(__name__)

# SST's classes by view (class ids are positions); see ``sst_options``.
_SST_FINE = ["very_negative", "negative", "neutral", "positive", "very_positive"]
_SST_BINARY = ["negative", "positive"]


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
    trained: Mapping[str, Any] | None = None,
) -> DataBundle:
    """Labelled PTB trees of one's own (see the module docstring; keys as ``dataset.*``).

    ``bundle.info``: ``vocab``, ``num_classes``, ``predict_classes``, ``polarity``,
    ``class_names``, ``internal_words`` (False), ``embeddings`` (or ``None``) and
    ``non_binary_tree`` (where the first tree that is not binary is, or ``None``).
    ``trained``: a trained run's ``info`` (``foldexp eval``): without ``num_classes``, the
    run's number of classes, not the largest label of a file that may hold some classes only.
    """
    if num_classes is None and trained and trained.get("num_classes"):
        num_classes = int(trained["num_classes"])
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
    if num_classes is None:
        _log_inferred_classes(name, data.num_classes, label_map)
    train, dev, test = data.trees
    vocab = _vocabulary(data.trees, lowercase, min_count, word_vectors if vector_vocab else None)
    non_binary = first_non_binary(data.trees, data.origins)
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


def _log_inferred_classes(name: str, num_classes: int, label_map: list[int] | None) -> None:
    """Says how many classes the training labels gave, where ``dataset.num_classes`` is unset."""
    how = "after dataset.label_map" if label_map is not None else "dataset.num_classes not set"
    log.info(
        "%s: %d classes, 0..%d, from the training labels (%s)",
        name,
        num_classes,
        num_classes - 1,
        how,
    )


def _vocabulary(
    trees: Sequence[list[Any]], lowercase: bool, min_count: int, vector_file: str | None
) -> Vocabulary:
    """The training trees' words; with ``vector_file`` (``dataset.vector_vocab``), also the
    dev and test words that file has a vector for."""
    train, dev, test = trees
    vocab = Vocabulary.from_trees(train, lowercase=lowercase, min_count=min_count)
    if vector_file:
        vocab = _with_vector_words(vocab, vector_file, [dev, test])
    return vocab


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
