"""Unit tests for Vocabulary: ordering, unknown words, lower-casing, min_count, JSON files."""

from __future__ import annotations

import json

import pytest

from foldexp.data.errors import FormatError
from foldexp.data.trees import Tree
from foldexp.data.vocab import Vocabulary

TOKENS = ["the", "cat", "The", "dog", "the", "cat", "emu"]


def test_order_and_lookup():
    vocab = Vocabulary.from_tokens(TOKENS)
    # unk first, then by count (desc), ties alphabetically
    assert vocab.words == ["<unk>", "cat", "the", "The", "dog", "emu"]
    assert len(vocab) == 6
    assert vocab.index("cat") == 1 and vocab.index("zebra") == 0 == vocab.unk_index
    assert vocab.encode(["the", "zebra"]) == [2, 0]
    assert vocab.word(4) == "dog"
    assert "dog" in vocab and "zebra" not in vocab and 3 not in vocab
    assert vocab.counts["the"] == 2


def test_lowercase_min_count_specials():
    vocab = Vocabulary.from_tokens(TOKENS, lowercase=True, min_count=2, specials=("<pad>",))
    assert vocab.words == ["<unk>", "<pad>", "the", "cat"]
    assert vocab.index("THE") == 2
    assert vocab.index("dog") == 0  # seen once: below min_count
    assert "Cat" in vocab
    with pytest.raises(ValueError, match="min_count"):
        Vocabulary.from_tokens(TOKENS, min_count=0)


def test_from_trees():
    tree = Tree(1, children=(Tree(2, "a"), Tree(1, children=(Tree(2, "b"), Tree(2, "a")))))
    assert Vocabulary.from_trees([tree]).words == ["<unk>", "a", "b"]


def test_duplicates_rejected():
    with pytest.raises(ValueError, match="appears twice"):
        Vocabulary(["a", "b", "a"])
    with pytest.raises(ValueError, match="appears twice"):
        Vocabulary(["<unk>"])


def test_save_load_round_trip(tmp_path):
    vocab = Vocabulary.from_tokens(TOKENS, lowercase=True, specials=("<pad>",))
    path = tmp_path / "sub" / "vocab.json"
    vocab.save(path)
    loaded = Vocabulary.load(path)
    assert loaded == vocab
    assert loaded.lowercase and loaded.specials == ("<pad>",)
    assert loaded.counts == vocab.counts
    assert [p.name for p in path.parent.iterdir()] == ["vocab.json"]  # no temp files left


def test_load_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(FormatError, match=r"bad\.json: expected a foldexp vocabulary JSON"):
        Vocabulary.load(bad)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"format": "something"}), encoding="utf-8")
    with pytest.raises(FormatError, match="format"):
        Vocabulary.load(other)
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps({"format": "foldexp.vocabulary", "version": 1}))
    with pytest.raises(FormatError, match="field 'unk'"):
        Vocabulary.load(partial)
