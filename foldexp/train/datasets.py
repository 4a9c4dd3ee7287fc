"""Dataset builders named by ``dataset._target_``: each returns a ``DataBundle``.

A builder loads or generates the three splits and reports what the model needs to size itself
(vocabulary, number of classes, pretrained vectors). Models receive ``bundle.info`` as keyword
arguments when Hydra instantiates them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from foldexp.data.calculator import OPERATORS, calculator_splits
from foldexp.data.sst import SST_CLASSES, load_sst
from foldexp.data.vocab import Vocabulary

__all__ = ["DataBundle", "calculator", "sst", "sst_sentences", "molecules", "marked_sequences"]

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
    **_: Any,
) -> DataBundle:
    """SST trees under ``data_dir/sst``, in the fine or binary view.

    ``vector_vocab``: with ``word_vectors``, dev/test words that have a vector get their own row.
    ``neutral_nodes`` (binary view; no effect on the fine view): neutral phrases train a third
    class, as Tai et al. (2015); the model predicts among the first two only (``predict_classes``).
    """
    view, labels = str(getattr(view, "value", view)), str(getattr(labels, "value", labels))
    splits = [
        load_sst(s, data_dir, view=view, labels=labels, neutral_nodes=neutral_nodes)
        for s in ("train", "dev", "test")
    ]
    if limit:
        splits = [s[:limit] for s in splits]
    vocab = Vocabulary.from_trees(splits[0], lowercase=lowercase, min_count=min_count)
    if word_vectors and vector_vocab:
        vocab = _with_vector_words(vocab, word_vectors, splits[1:])
    embeddings = _pretrained(word_vectors, vocab)
    return DataBundle(
        *splits,
        {
            "vocab": vocab,
            "num_classes": SST_CLASSES[view] + int(neutral_nodes and view == "binary"),
            "predict_classes": SST_CLASSES[view],
            # The fine view also scores negative (0-1) against positive (3-4), as TF Fold did.
            "polarity": ([0, 1], [3, 4]) if view == "fine" else None,
            "internal_words": False,
            "embeddings": embeddings,
        },
    )


# ---------------------------------------------------------------------- sentences, molecules,
# marked sequences (the sequence LSTM, weave and attention experiments)


def sst_sentences(
    data_dir: str,
    view: str = "fine",
    lowercase: bool = False,
    min_count: int = 1,
    word_vectors: str | None = None,
    limit: int = 0,
    name: str = "sst_sentences",
    **_: Any,
) -> DataBundle:
    """SST sentences as ``(tokens, root_label)`` pairs, in the fine or binary view.

    The binary view drops neutral-root sentences, as for the trees. Only root labels are kept:
    a sequence model sees the sentence, not its phrases.
    """
    from foldexp.data import sequences

    view = str(getattr(view, "value", view))
    splits = [load_sst(s, data_dir, view=view, labels="root") for s in ("train", "dev", "test")]
    if limit:
        splits = [s[:limit] for s in splits]
    sentences = [sequences.sst_sentences(trees) for trees in splits]
    vocab = Vocabulary.from_tokens(
        (w for words, _ in sentences[0] for w in words), lowercase=lowercase, min_count=min_count
    )
    embeddings = _pretrained(word_vectors, vocab)
    return DataBundle(
        *sentences,
        {"vocab": vocab, "num_classes": SST_CLASSES[view], "embeddings": embeddings},
    )


def molecules(
    source: str,
    data_dir: str,
    cache_dir: str | None = None,
    split: str = "random",
    fractions: tuple[float, float, float] | list[float] = (0.8, 0.1, 0.1),
    seed: int = 0,
    limit: int = 0,
    name: str = "molecules",
    **_: Any,
) -> DataBundle:
    """A MoleculeNet regression set (``esol`` | ``freesolv``) featurised into graphs and split.

    ``split=random`` shuffles with ``seed``; ``split=scaffold`` groups molecules by Bemis-Murcko
    scaffold (deterministic, ``seed`` unused). ``bundle.info`` carries the feature sizes and the
    mean and standard deviation of each target over the training split (labelled entries only),
    which the model standardises with.
    """
    import numpy as np

    from foldexp.data.molecules import load_esol, load_freesolv
    from foldexp.data.splits import random_split, scaffold_split, take

    source, split = str(getattr(source, "value", source)), str(getattr(split, "value", split))
    loaders = {"esol": load_esol, "freesolv": load_freesolv}
    if source not in loaders:
        raise ValueError(f"unknown molecule set {source!r}; expected one of {sorted(loaders)}")
    dataset = loaders[source](data_dir, cache_dir=cache_dir, progress=False)
    graphs = list(dataset)[:limit] if limit else list(dataset)
    fractions = tuple(float(f) for f in fractions)
    if split == "random":
        parts = random_split(len(graphs), fractions, seed=seed)
    elif split == "scaffold":
        parts = scaffold_split([g.smiles for g in graphs], fractions)
    else:
        raise ValueError(f"unknown split {split!r}; expected 'random' or 'scaffold'")
    train, dev, test = (take(graphs, p) for p in parts)
    targets = np.stack([g.targets for g in train]).astype(np.float64)
    mask = np.stack([g.target_mask for g in train])
    count = np.maximum(mask.sum(0), 1)
    mean = (targets * mask).sum(0) / count
    std = np.sqrt((((targets - mean) * mask) ** 2).sum(0) / count)
    std = np.where(std > 0, std, 1.0)  # a constant target: nothing to scale
    first = graphs[0]
    return DataBundle(
        train,
        dev,
        test,
        {
            "atom_features": int(first.atom_features.shape[1]),
            "pair_features": int(first.pair_features.shape[2]),
            "num_targets": int(first.targets.shape[0]),
            "target_mean": [float(m) for m in mean],
            "target_std": [float(s) for s in std],
        },
    )


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

    problem = str(getattr(problem, "value", problem))
    makers = {"addition": addition_problem, "multiplication": multiplication_problem}
    if problem not in makers:
        raise ValueError(f"unknown problem {problem!r}; expected one of {sorted(makers)}")
    make = makers[problem]
    splits = [
        make(n, min_len, max_len, seed=3 * seed + k) for k, n in enumerate((n_train, n_dev, n_test))
    ]
    return DataBundle(*splits, {"input_size": 2})
