"""``Vocabulary.to_dict`` / ``from_dict``: plain JSON types and an exact round trip."""

from __future__ import annotations

import json

import pytest

from foldexp.data.errors import FormatError
from foldexp.data.vocab import Vocabulary

TOKENS = ["the", "cat", "The", "dog", "the", "cat", "emu", "émeu"]


def _same(a: Vocabulary, b: Vocabulary) -> None:
    assert a == b
    assert (a.words, a.unk, a.specials, a.lowercase) == (b.words, b.unk, b.specials, b.lowercase)
    assert a.counts == b.counts
    assert [a.index(w) for w in TOKENS + ["zebra"]] == [b.index(w) for w in TOKENS + ["zebra"]]


@pytest.mark.parametrize(
    "options",
    [{}, {"lowercase": True, "min_count": 2}, {"specials": ("<pad>", "<s>"), "unk": "UNK"}],
)
def test_round_trip_through_json_is_exact(options: dict) -> None:
    vocab = Vocabulary.from_tokens(TOKENS, **options)
    payload = vocab.to_dict()
    text = json.dumps(payload)  # plain JSON types only: this would raise otherwise
    _same(Vocabulary.from_dict(json.loads(text)), vocab)


def test_dict_holds_only_json_types() -> None:
    payload = Vocabulary.from_tokens(TOKENS).to_dict()
    assert set(payload) == {"format", "version", "unk", "specials", "lowercase", "words", "counts"}
    assert all(isinstance(c, int) for c in payload["counts"].values())
    assert payload["words"][0] == "cat"  # the unknown token is implied, not listed


def test_save_and_load_use_the_same_form(tmp_path) -> None:
    vocab = Vocabulary.from_tokens(TOKENS, specials=("<pad>",))
    vocab.save(tmp_path / "v.json")
    assert json.loads((tmp_path / "v.json").read_text(encoding="utf-8")) == vocab.to_dict()
    _same(Vocabulary.load(tmp_path / "v.json"), vocab)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"format": "x"}, "format"),
        ({"version": 9}, "version 1"),
        ({"words": "cat"}, "'words' missing or not a JSON list"),
        ({"counts": {"cat": "2"}}, "integers"),
        ({"words": ["cat", 3]}, "string"),
        ({"words": ["cat", "cat"]}, "appears twice"),
    ],
)
def test_from_dict_refuses_a_bad_payload(change: dict, message: str) -> None:
    payload = {**Vocabulary.from_tokens(TOKENS).to_dict(), **change}
    with pytest.raises(FormatError, match=message):
        Vocabulary.from_dict(payload, source="run_info.json")
