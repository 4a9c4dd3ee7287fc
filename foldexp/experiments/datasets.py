"""Dataset builders named by ``dataset._target_``: each returns a ``DataBundle``.

A builder loads or generates the three splits and reports what the model needs to size itself
(vocabulary, number of classes, pretrained vectors). Models receive ``bundle.info`` as keyword
arguments when Hydra instantiates them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from foldexp.config import MAX_GENERATED, enum_value
from foldexp.config.errors import ConfigError
from foldexp.data.calculator import OPERATORS, calculator_splits
from foldexp.data.errors import DatasetNotFoundError
from foldexp.data.sst import SST_SPLITS, sst_path
from foldexp.data.vocab import Vocabulary
from foldexp.experiments.memory import check_memory

__all__ = ["DataBundle", "calculator", "sst", "sst_sentences", "marked_sequences"]

log = logging.getLogger(__name__)


def _with_vector_words(vocab: Vocabulary, word_vectors: str, splits: list[list[Any]]) -> Vocabulary:
    """``vocab`` plus the words of ``splits`` it lacks that have a pretrained vector.

    Only words are read (never labels): a dev/test word unseen in training then keeps its
    pretrained vector instead of collapsing onto the unknown token, as Tai et al.'s vocabulary
    covers all of SST. The added words get count 0, so coverage stays a train-token figure.
    """
    from foldexp.data.wordvec import default_lookup_keys, read_word_vectors

    form = str.lower if vocab.lowercase else str
    unseen = sorted(
        {
            form(leaf.word)
            for trees in splits
            for tree in trees
            for leaf in tree.leaves()
            if leaf.word is not None and form(leaf.word) not in vocab
        }
    )
    keys = {w: default_lookup_keys(w) for w in unseen}
    vectors, _ = read_word_vectors(word_vectors, {k for ks in keys.values() for k in ks})
    extra = [w for w in unseen if any(k in vectors for k in keys[w])]
    counts = {**vocab.counts, **dict.fromkeys(extra, 0)}
    words = vocab.words[1 + len(vocab.specials) :] + extra
    log.info("vocabulary: %d train words + %d dev/test words with vectors", len(vocab), len(extra))
    return Vocabulary(
        words, unk=vocab.unk, specials=vocab.specials, lowercase=vocab.lowercase, counts=counts
    )


def _pretrained(word_vectors: str | None, vocab: Vocabulary) -> Any:
    """Pretrained vectors aligned to ``vocab`` (a matrix), or ``None`` without a file."""
    if not word_vectors:
        return None
    from foldexp.data.wordvec import align_word_vectors

    aligned = align_word_vectors(word_vectors, vocab)
    log.info(
        "word vectors %s: %d x %d, coverage %.1f%% of train tokens",
        word_vectors,
        *aligned.matrix.shape,
        100 * aligned.coverage,
    )
    return aligned.matrix


@dataclass
class DataBundle:
    """Three splits plus the facts a model is built from."""

    train: list[Any]
    dev: list[Any]
    test: list[Any]
    info: dict[str, Any] = field(default_factory=dict)

    def sizes(self) -> str:
        return f"train {len(self.train)}, dev {len(self.dev)}, test {len(self.test)}"


#: Memory of one generated calculator node, kept: its tree node, label and share of the
#: duplicate check (1e5 trees of depth 3, 9.7 nodes each, took 110 MB).
_CALCULATOR_NODE_BYTES = 120


def expected_calculator_nodes(max_depth: int, leaf_prob: float) -> float:
    """The mean size of a generated expression: the root has two children, and a node above
    ``max_depth`` two more with probability ``1 - leaf_prob`` (``random_expression``), so the
    size grows as ``(2 (1 - leaf_prob)) ** max_depth``: about 6e8 nodes at depth 60 with the
    default leaf_prob, which ran until killed."""
    branch = 2 * (1 - leaf_prob)
    return 1 + sum(2 * branch ** (d - 1) for d in range(1, max_depth + 1))


def distinct_calculator_expressions(max_depth: int, leaf_prob: float) -> int:
    """How many distinct expressions ``random_expression`` can draw: an operator at the root
    over two subtrees of depth <= ``max_depth - 1`` (10 digits, or 3 operators over two such
    subtrees); only the full trees when no node above max_depth is a digit (``leaf_prob=0``),
    only an operator over two digits when every one is (``leaf_prob=1``). Asking for more
    distinct ones drew 50 per tree before failing: n=1e6 at depth 2 took most of an hour."""
    if leaf_prob >= 1:
        return 3 * 10 * 10
    count = 10  # subtrees of depth <= d (full ones of depth d with leaf_prob=0), from d = 0
    for _ in range(max_depth - 1):
        if count > MAX_GENERATED:
            break  # more than any n asks for; the numbers would grow to millions of digits
        count = (10 if leaf_prob > 0 else 0) + 3 * count * count
    return 3 * count * count


def calculator(
    n: int,
    max_depth: int,
    n_classes: int,
    leaf_prob: float,
    seed: int,
    name: str = "calculator",
    **_: Any,
) -> DataBundle:
    """Calculator expression trees; every node labelled with its value mod ``n_classes``."""
    distinct = distinct_calculator_expressions(max_depth, leaf_prob)
    if n > distinct:
        raise ConfigError(
            f"dataset.n={n}, but there are only {distinct} distinct expressions of depth <= "
            f"dataset.max_depth={max_depth} with dataset.leaf_prob={leaf_prob}; lower dataset.n "
            "or raise dataset.max_depth"
        )
    nodes = expected_calculator_nodes(max_depth, leaf_prob)
    check_memory(
        int(n * nodes * _CALCULATOR_NODE_BYTES),
        f"dataset: {n} expressions (dataset.n) of about {nodes:.3g} nodes each "
        f"(dataset.max_depth={max_depth}, dataset.leaf_prob={leaf_prob}: a node above max_depth "
        "has two children with probability 1 - leaf_prob)",
        "lower dataset.max_depth or dataset.n, or raise dataset.leaf_prob",
    )
    train, dev, test = calculator_splits(
        n, max_depth, seed, n_classes=n_classes, leaf_prob=leaf_prob
    )
    vocab = Vocabulary([str(d) for d in range(10)] + list(OPERATORS))
    return DataBundle(
        train,
        dev,
        test,
        {"vocab": vocab, "num_classes": n_classes, "internal_words": True, "embeddings": None},
    )


def sst(
    data_dir: str,
    view: str = "fine",
    labels: str = "all",
    lowercase: bool = False,
    min_count: int = 1,
    word_vectors: str | None = None,
    vector_vocab: bool = False,
    neutral_nodes: bool = False,
    limit: int = 0,
    name: str = "sst",
) -> DataBundle:
    """SST trees under ``data_dir/sst``, in the fine or binary view: the ``trees_ptb`` builder
    (``foldexp.experiments.tree_data``) with SST's relabelling (``tree_data.sst_options``).

    ``vector_vocab``: with ``word_vectors``, dev/test words that have a vector get their own row.
    ``neutral_nodes`` (binary view; no effect on the fine view): neutral phrases train a third
    class, as Tai et al. (2015); the model predicts among the first two only (``predict_classes``).
    """
    from foldexp.experiments.tree_data import sst_options, trees_ptb

    return trees_ptb(
        str(_sst_folder(data_dir)),
        name=name,
        labels=labels,
        lowercase=lowercase,
        min_count=min_count,
        word_vectors=word_vectors,
        vector_vocab=vector_vocab,
        limit=limit,
        **sst_options(view, neutral_nodes),
    )


def _sst_folder(data_dir: str) -> Path:
    """``data_dir/sst``, holding the three split files; says how to get them when it does not."""
    folder = sst_path("train", data_dir).parent
    for split in SST_SPLITS:
        if not (folder / f"{split}.txt").is_file():
            raise DatasetNotFoundError(
                f"SST {split} split not found: {folder / f'{split}.txt'} does not exist. Get it "
                "with `foldexp data fetch sst` (needs internet) or `foldexp data import sst "
                "PATH` (PATH = trainDevTestTrees_PTB.zip or a folder with train/dev/test.txt); "
                "the data directory is FOLDEXP_DATA or ./data, or the one given: "
                "foldexp train paths.data_dir=DIR, foldexp data --data-dir DIR."
            )
    return folder


# ---------------------------------------------------------------------- sentences, marked
# sequences (the sequence LSTM and attention experiments; molecules: ``molecule_data.py``)


def sst_sentences(
    data_dir: str,
    view: str = "fine",
    lowercase: bool = False,
    min_count: int = 1,
    word_vectors: str | None = None,
    limit: int = 0,
    name: str = "sst_sentences",
) -> DataBundle:
    """SST sentences as ``(tokens, root_label)`` pairs, in the fine or binary view.

    The trees of ``sst`` (the ``trees_ptb`` reader with SST's options), flattened. The binary
    view drops neutral-root sentences, as for the trees. Only root labels are kept: a sequence
    model sees the sentence, not its phrases.
    """
    from foldexp.data import sequences
    from foldexp.experiments.tree_data import sst_options
    from foldexp.experiments.tree_files import load_tree_splits

    options = sst_options(view, neutral_nodes=False)
    data = load_tree_splits(
        str(_sst_folder(data_dir)),
        num_classes=options["num_classes"],
        label_map=options["label_map"],
        drop_unscored_roots=options["drop_unscored_roots"],
        labels="root",
        limit=limit,
    )
    sentences = [sequences.sst_sentences(trees) for trees in data.trees]
    vocab = Vocabulary.from_tokens(
        (w for words, _ in sentences[0] for w in words), lowercase=lowercase, min_count=min_count
    )
    embeddings = _pretrained(word_vectors, vocab)
    return DataBundle(
        *sentences,
        {
            "vocab": vocab,
            "num_classes": data.num_classes,
            "class_names": options["class_names"],
            "embeddings": embeddings,
        },
    )


_SEQUENCE_STEP_BYTES = 8  # a step: its value and its mark, float32
_SEQUENCE_BYTES = 200  # a sequence's array and example objects


def marked_sequences(
    problem: str = "addition",
    n_train: int = 10000,
    n_dev: int = 1000,
    n_test: int = 1000,
    min_len: int = 50,
    max_len: int = 100,
    seed: int = 0,
    name: str = "addition",
    **_: Any,
) -> DataBundle:
    """Raffel & Ellis's addition or multiplication problem: three independently drawn splits.

    Each split has its own generator seed derived from ``seed``, so no sequence is shared.
    """
    from foldexp.data.sequences import addition_problem, multiplication_problem

    problem = enum_value(problem)
    if min_len > max_len:
        raise ConfigError(
            f"dataset.min_len={min_len} is above dataset.max_len={max_len}; lengths are drawn "
            "from [min_len, max_len]"
        )
    total = n_train + n_dev + n_test
    check_memory(
        total * ((min_len + max_len) // 2 * _SEQUENCE_STEP_BYTES + _SEQUENCE_BYTES),
        f"dataset: {total} sequences (dataset.n_train, n_dev, n_test) of "
        f"{min_len}..{max_len} steps (dataset.min_len, dataset.max_len)",
        "lower the counts or the lengths",
    )
    makers = {"addition": addition_problem, "multiplication": multiplication_problem}
    if problem not in makers:
        raise ValueError(f"unknown problem {problem!r}; expected one of {sorted(makers)}")
    make = makers[problem]
    splits = [
        make(n, min_len, max_len, seed=3 * seed + k) for k, n in enumerate((n_train, n_dev, n_test))
    ]
    return DataBundle(*splits, {"input_size": 2})
