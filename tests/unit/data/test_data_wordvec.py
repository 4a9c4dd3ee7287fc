"""Unit tests for the GloVe reader and vocabulary alignment, on tiny temporary files."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from foldexp.data.errors import FormatError
from foldexp.data.vocab import Vocabulary
from foldexp.data.wordvec import align_word_vectors, default_lookup_keys, read_word_vectors

GLOVE = "the 0.1 0.2 0.3\ncat -1 0 1e-2\n( 5 5 5\n/ 7 7 7\nfilm 1 2 3\n"


@pytest.fixture(params=["txt", "gz"])
def glove_file(tmp_path, request):
    if request.param == "gz":
        path = tmp_path / "vectors.txt.gz"
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(GLOVE)
    else:
        path = tmp_path / "vectors.txt"
        path.write_text(GLOVE, encoding="utf-8")
    return path


def test_read(glove_file):
    vectors, dim = read_word_vectors(glove_file)
    assert dim == 3 and set(vectors) == {"the", "cat", "(", "/", "film"}
    assert vectors["cat"].dtype == np.float32
    np.testing.assert_allclose(vectors["cat"], [-1, 0, 0.01])
    only, _ = read_word_vectors(glove_file, {"film", "zzz"})
    assert set(only) == {"film"}


def test_align(glove_file):
    tokens = ["The", "the", "cat", "cat", "cat", "-LRB-", "writer\\/director", "\\/", "zorb"]
    vocab = Vocabulary.from_tokens(tokens)
    matrix, coverage, missing = align_word_vectors(glove_file, vocab, seed=3)
    assert matrix.shape == (len(vocab), 3) and matrix.dtype == np.float32
    np.testing.assert_allclose(matrix[vocab.index("cat")], [-1, 0, 0.01])
    np.testing.assert_allclose(matrix[vocab.index("The")], [0.1, 0.2, 0.3])  # via lower-case
    np.testing.assert_allclose(matrix[vocab.index("-LRB-")], [5, 5, 5])  # via unescaping
    np.testing.assert_allclose(matrix[vocab.index("\\/")], [7, 7, 7])
    assert missing == ["writer\\/director", "zorb"]
    # token-weighted: 7 of the 9 occurrences have vectors
    assert coverage == pytest.approx(7 / 9)
    # missing rows are small, seeded random vectors
    row = matrix[vocab.index("zorb")]
    assert np.all(np.abs(row) <= 0.1) and np.any(row != 0)
    again = align_word_vectors(glove_file, vocab, seed=3).matrix
    np.testing.assert_array_equal(matrix, again)
    assert not np.array_equal(matrix, align_word_vectors(glove_file, vocab, seed=4).matrix)


def test_lookup_keys():
    assert default_lookup_keys("-LRB-") == ["-LRB-", "-lrb-", "("]
    assert default_lookup_keys("-lrb-") == ["-lrb-", "("]
    assert default_lookup_keys("film") == ["film"]


def test_malformed_line_names_file_and_line(tmp_path):
    path = tmp_path / "broken.txt"
    path.write_text("a 1 2 3\nb 1 2\nc 1 2 3\n", encoding="utf-8")
    with pytest.raises(FormatError, match=r"broken\.txt:2: expected a word and 3 values, got 2"):
        read_word_vectors(path)
    path.write_text("a 1 2 3\nb 1 x 3\n", encoding="utf-8")
    with pytest.raises(
        FormatError,
        match=r"broken\.txt:2: expected 3 numbers after the word, but value 2 is not a number",
    ):
        read_word_vectors(path)
    path.write_text("", encoding="utf-8")
    with pytest.raises(FormatError, match="empty file"):
        read_word_vectors(path)
    path.write_bytes(b"a 1 2\n\xff 1 2\n")
    with pytest.raises(FormatError, match=r"broken\.txt:2:1: expected UTF-8"):
        read_word_vectors(path)


def test_word2vec_header(tmp_path):
    path = tmp_path / "w2v.txt"
    path.write_text("2 3\na 1 2 3\nb 4 5 6\n", encoding="utf-8")
    vectors, dim = read_word_vectors(path)
    assert dim == 3 and set(vectors) == {"a", "b"}
