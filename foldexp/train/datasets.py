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

__all__ = ["DataBundle", "calculator", "sst"]

log = logging.getLogger(__name__)


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
    limit: int = 0,
    name: str = "sst",
    **_: Any,
) -> DataBundle:
    """SST trees under ``data_dir/sst``, in the fine or binary view."""
    view, labels = str(getattr(view, "value", view)), str(getattr(labels, "value", labels))
    splits = [load_sst(s, data_dir, view=view, labels=labels) for s in ("train", "dev", "test")]
    if limit:
        splits = [s[:limit] for s in splits]
    vocab = Vocabulary.from_trees(splits[0], lowercase=lowercase, min_count=min_count)
    embeddings = None
    if word_vectors:
        from foldexp.data.wordvec import align_word_vectors

        aligned = align_word_vectors(word_vectors, vocab)
        log.info(
            "word vectors %s: %d x %d, coverage %.1f%% of train tokens",
            word_vectors,
            *aligned.matrix.shape,
            100 * aligned.coverage,
        )
        embeddings = aligned.matrix
    return DataBundle(
        *splits,
        {
            "vocab": vocab,
            "num_classes": SST_CLASSES[view],
            "internal_words": False,
            "embeddings": embeddings,
        },
    )
