"""Unit tests for the PTB tree parser and SST files: hand-written lines, errors, fuzzing."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from foldexp.data.errors import TreeParseError
from foldexp.data.ptb import parse_tree, read_ptb_file, unescape_word
from foldexp.data.sst import read_sst_file
from foldexp.data.trees import Tree

SST_LINE = "(3 (2 It) (4 (4 (2 's) (4 (3 (2 a) (4 lovely)) (2 film))) (2 .)))"


def test_parses_sst_line():
    t = parse_tree(SST_LINE, label_range=(0, 4))
    assert t.label == 3
    assert t.words() == ["It", "'s", "a", "lovely", "film", "."]
    assert t.labels()[-1] == 3
    assert t.to_ptb() == SST_LINE


@pytest.mark.parametrize(
    ("text", "word", "plain"),
    [
        ("(2 \\/)", "\\/", "/"),
        ("(2 writer\\/director)", "writer\\/director", "writer/director"),
        ("(2 \\*\\*\\*)", "\\*\\*\\*", "***"),
        ("(2 -LRB-)", "-LRB-", "("),
        ("(2 -RRB-)", "-RRB-", ")"),
        ("(2 ``)", "``", "``"),
        ("(2 '')", "''", "''"),
        ("(2 8 1\\/2)", "8 1\\/2", "8 1/2"),  # a leaf is everything up to its ')'
        ("(2 2\u00a01\\/2)", "2\u00a01\\/2", "2\u00a01/2"),  # non-breaking space stays
        ("(2 clichés)", "clichés", "clichés"),
    ],
)
def test_special_tokens(text, word, plain):
    assert parse_tree(text).word == word
    assert parse_tree(text, unescape=True).word == plain
    assert unescape_word(word) == plain


def test_whitespace_tolerance_and_signed_labels():
    t = parse_tree("  ( 1\t(0 a)   (-1 b) )  ")
    assert t.labels() == [0, -1, 1]
    assert parse_tree("(12 x)").label == 12


@pytest.mark.parametrize(
    ("text", "column", "expected"),
    [
        ("(2 a", 5, "expected ')' to close the '(' at column 1, got end of line"),
        ("(3 (2 a) (2 b)", 15, "expected ')' to close the '(' at column 1"),
        ("(2 a))", 6, "got unbalanced ')'"),
        ("((2 a) (2 b))", 2, "expected a label after '(', got '('"),
        ("( a)", 3, "expected an integer label after '(', got 'a'"),
        ("(2x a)", 2, "expected an integer label after '(', got '2x'"),
        ("(3 (7 a) (2 b))", 5, "expected a label in 0..4, got 7"),
        ("(2 a (2 b))", 6, "expected ')' to close leaf 'a', got '('"),
        ("(2 (2 a) b)", 10, "expected '(' or ')' after a child node, got 'b'"),
        ("(2 )", 4, "expected a word or a child '(' after label 2, got ')'"),
        ("(2 a) (2 b)", 7, "expected end of line after the tree, got '('"),
        ("(2 a) b", 7, "expected end of line after the tree, got 'b'"),
        ("x (2 a)", 1, "expected '(' to start a tree, got 'x"),
        ("", 1, "expected a tree '(label ...)', got an empty line"),
        ("(", 2, "expected a label after '(', got end of line"),
    ],
)
def test_errors_have_line_and_column(text, column, expected):
    with pytest.raises(TreeParseError) as info:
        parse_tree(text, path="trees.txt", line=7, label_range=(0, 4))
    err = info.value
    assert (err.path, err.line, err.column) == ("trees.txt", 7, column)
    assert expected in err.message
    assert str(err).startswith(f"trees.txt:7:{column}: expected")


def test_internal_words_option():
    text = "(5 + (2 2) (3 3))"
    with pytest.raises(TreeParseError, match="close leaf"):
        parse_tree(text)
    t = parse_tree(text, internal_words=True)
    assert t.word == "+" and t.words() == ["2", "3"]
    assert t.to_ptb() == text


def test_file_errors_name_the_file(tmp_path):
    good = tmp_path / "good.txt"
    good.write_text("(2 a)\n\n(3 (2 b) (4 c))\n", encoding="utf-8")
    assert [t.label for t in read_sst_file(good)] == [2, 3]

    bad = tmp_path / "bad.txt"
    bad.write_text("(2 a)\n(3 (2 b) (7 c))\n", encoding="utf-8")
    with pytest.raises(TreeParseError) as info:
        read_sst_file(bad)
    assert str(info.value) == f"{bad}:2:11: expected a label in 0..4, got 7"

    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n", encoding="utf-8")
    with pytest.raises(TreeParseError, match=r"empty\.txt:1:1: .*got an empty file"):
        read_sst_file(empty)

    latin = tmp_path / "latin1.txt"
    latin.write_bytes("(2 a)\n(2 caf\u00e9)\n".encode("latin-1"))
    expected = r"latin1\.txt:2:7: expected UTF-8 text, got byte 0xe9"
    with pytest.raises(TreeParseError, match=expected):
        read_sst_file(latin)

    bom = tmp_path / "bom.txt"
    bom.write_bytes("\ufeff(2 a)\r\n(1 b)\r\n".encode())
    assert [t.word for t in read_ptb_file(bom)] == ["a", "b"]

    with pytest.raises(FileNotFoundError):
        read_sst_file(tmp_path / "missing.txt")


# --------------------------------------------------------------------------- fuzzing

_ALPHABET = st.sampled_from(list("()()()  0123-+ab\\/\t\n\r\u00a0é*"))
_TEXT = st.one_of(
    st.text(_ALPHABET, max_size=40),
    st.text(max_size=30),  # arbitrary unicode, including odd whitespace
)


@settings(max_examples=300, deadline=None)
@given(_TEXT)
def test_fuzz_parse_or_clean_error(text):
    try:
        tree = parse_tree(text)
    except TreeParseError as err:
        assert err.line == 1
        assert 1 <= err.column <= len(text) + 1
        assert "expected" in err.message
        return
    assert parse_tree(tree.to_ptb()) == tree


_WORD = st.text(st.characters(blacklist_characters="()", blacklist_categories=("Cs",)), min_size=1)
_WORD = _WORD.map(lambda w: w.strip(" \t\r\n")).filter(bool)


def _trees(max_leaves: int = 12):
    leaf = st.builds(lambda label, word: Tree(label, word), st.integers(-3, 40), _WORD)
    return st.recursive(
        leaf,
        lambda kids: st.builds(
            lambda label, children: Tree(label, None, children),
            st.integers(0, 4),
            st.lists(kids, min_size=1, max_size=3),
        ),
        max_leaves=max_leaves,
    )


@settings(max_examples=200, deadline=None)
@given(_trees())
def test_fuzz_generated_trees_round_trip(tree):
    assert parse_tree(tree.to_ptb()) == tree
