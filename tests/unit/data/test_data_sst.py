"""Unit tests for SST loading and label views, on a tiny hand-written treebank."""

from __future__ import annotations

import pytest

from foldexp.data.errors import DatasetNotFoundError
from foldexp.data.sequences import sst_sentences
from foldexp.data.sst import binary_label, label_counts, load_sst, root_only, sst_path, to_binary
from foldexp.data.trees import NO_LABEL

LINES = {
    "train": [
        "(3 (2 It) (4 (2 is) (4 good)))",
        "(2 (2 An) (2 (2 average) (2 film)))",
        "(0 (1 (2 Truly) (0 awful)) (2 .))",
    ],
    "dev": ["(4 (2 -LRB-) (4 (4 great) (2 -RRB-)))"],
    "test": ["(1 (2 8 1\\/2) (1 weeks))"],
}


@pytest.fixture
def sst_dir(tmp_path):
    (tmp_path / "sst").mkdir()
    for split, lines in LINES.items():
        (tmp_path / "sst" / f"{split}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return tmp_path


def test_load_fine_all_nodes(sst_dir):
    train = load_sst("train", sst_dir)
    assert [t.label for t in train] == [3, 2, 0]
    assert train[0].labels() == [2, 2, 4, 4, 3]
    assert [t.to_ptb() for t in train] == LINES["train"]


def test_binary_view_drops_neutral_roots_and_marks_neutral_nodes(sst_dir):
    train = load_sst("train", sst_dir, view="binary")
    assert [t.label for t in train] == [1, 0]  # the neutral-root tree is gone
    assert train[0].labels() == [NO_LABEL, NO_LABEL, 1, 1, 1]
    assert train[1].labels() == [NO_LABEL, 0, 0, NO_LABEL, 0]
    assert to_binary(load_sst("train", sst_dir)[1]) is None
    assert [binary_label(x) for x in range(5)] == [0, 0, NO_LABEL, 1, 1]
    with pytest.raises(ValueError, match="0..4"):
        binary_label(7)


def test_root_only_labels(sst_dir):
    train = load_sst("train", sst_dir, labels="root")
    assert train[0].labels() == [NO_LABEL] * 4 + [3]
    binary_root = load_sst("train", sst_dir, view="binary", labels="root")
    assert [t.labels()[-1] for t in binary_root] == [1, 0]
    assert root_only(train[0]) == train[0]


def test_unescape_option(sst_dir):
    assert load_sst("dev", sst_dir)[0].words() == ["-LRB-", "great", "-RRB-"]
    assert load_sst("dev", sst_dir, unescape=True)[0].words() == ["(", "great", ")"]
    assert load_sst("test", sst_dir, unescape=True)[0].words() == ["8 1/2", "weeks"]


def test_missing_split_says_what_to_do(tmp_path):
    with pytest.raises(DatasetNotFoundError) as info:
        load_sst("dev", tmp_path)
    message = str(info.value)
    assert str(tmp_path / "sst" / "dev.txt") in message
    assert "foldexp data import sst" in message and "foldexp data fetch sst" in message


def test_bad_arguments(sst_dir):
    with pytest.raises(ValueError, match="unknown SST split"):
        sst_path("validation", sst_dir)
    with pytest.raises(ValueError, match="view"):
        load_sst("train", sst_dir, view="coarse")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="labels"):
        load_sst("train", sst_dir, labels="leaves")  # type: ignore[arg-type]


def test_data_root_from_environment(sst_dir, monkeypatch):
    monkeypatch.setenv("FOLDEXP_DATA", str(sst_dir))
    assert len(load_sst("train")) == 3


def test_label_counts_and_sentences(sst_dir):
    train = load_sst("train", sst_dir)
    assert label_counts(train) == {3: 1, 2: 1, 0: 1}
    assert label_counts(train, nodes="all")[2] == 9
    assert sst_sentences(train)[0] == (["It", "is", "good"], 3)
