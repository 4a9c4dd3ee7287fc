"""Integration tests on the real SST files and GloVe vectors (skipped without FOLDEXP_DATA)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from foldexp.data.sst import SST_SIZES, label_counts, load_sst
from foldexp.data.vocab import Vocabulary
from foldexp.data.wordvec import align_word_vectors

# Root label counts 0/1/2/3/4 and node/leaf totals from the data README.
README = {
    "train": ((1092, 2218, 1624, 2322, 1288), 318_582, 163_563),
    "dev": ((139, 289, 229, 279, 165), 41_447, 21_274),
    "test": ((279, 633, 389, 510, 399), 82_600, 42_405),
}


@pytest.fixture(scope="module")
def data_dir() -> Path:
    root = os.environ.get("FOLDEXP_DATA")
    if not root:
        pytest.skip("FOLDEXP_DATA is not set (it points at the shared test data)")
    if not (Path(root) / "sst" / "train.txt").is_file():
        pytest.skip(f"no SST under FOLDEXP_DATA={root}")
    return Path(root)


@pytest.fixture(scope="module")
def train(data_dir):
    return load_sst("train", data_dir)


@pytest.mark.parametrize("split", ["train", "dev", "test"])
def test_counts_and_root_labels(data_dir, split):
    trees = load_sst(split, data_dir)
    roots, nodes, leaves = README[split]
    assert len(trees) == SST_SIZES[split]
    counts = label_counts(trees)
    assert tuple(counts[k] for k in range(5)) == roots
    assert sum(t.size() for t in trees) == nodes
    assert sum(len(t.leaves()) for t in trees) == leaves
    # strictly binary, every node labelled 0-4
    assert all(len(n.children) in (0, 2) for t in trees for n in t.nodes())


def test_binary_view_sizes(data_dir):
    sizes = {s: len(load_sst(s, data_dir, view="binary")) for s in ("train", "dev", "test")}
    assert sizes == {"train": 6920, "dev": 872, "test": 1821}


def test_round_trip_of_every_line(data_dir, train):
    lines = (data_dir / "sst" / "train.txt").read_text(encoding="utf-8").splitlines()
    assert [t.to_ptb() for t in train] == lines


def test_spaced_leaves_and_escapes(data_dir, train):
    words = {w for t in train for w in t.words()}
    assert {"-LRB-", "-RRB-", "\\*", "``", "''"} <= words
    # leaves with a space (this copy writes it as a no-break space) are kept whole
    assert "8 1\\/2" in {w.replace("\u00a0", " ") for w in words}
    plain = {w for t in load_sst("train", data_dir, unescape=True) for w in t.words()}
    assert {"(", ")", "*", "writer/director"} <= plain
    assert not {"-LRB-", "-RRB-", "\\*", "\\/"} & plain


def test_vocabulary_and_glove_coverage(data_dir, train):
    vocab = Vocabulary.from_trees(train)
    assert len(vocab) == 18_281  # 18,280 distinct tokens + <unk>
    glove = data_dir / "wordvec" / "glove.6B.50d.sst_vocab.txt.gz"
    if not glove.is_file():
        pytest.skip(f"no GloVe file at {glove}")
    matrix, coverage, missing = align_word_vectors(glove, vocab)
    assert matrix.shape == (len(vocab), 50)
    assert coverage > 0.99  # README: 99.1% of SST tokens
    assert len(missing) < 0.08 * len(vocab)
    lower = Vocabulary.from_trees(train, lowercase=True)
    assert align_word_vectors(glove, lower).coverage > 0.99
