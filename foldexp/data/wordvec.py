"""Pre-trained word vectors in the GloVe text format, aligned to a :class:`Vocabulary`.

The format is one word per line followed by its ``d`` float components, separated by single
spaces (``the 0.418 0.24968 ...``), optionally gzip-compressed (known by its magic bytes, whatever
the name: ``foldexp.data.textfile``, which streams the file line by line). A word2vec-style header
line ``N d`` is accepted too. Only the vectors of vocabulary words are converted to floats, so
aligning a small vocabulary against a large file stays quick; every line's field count is still
checked, so a truncated file is reported rather than half-read, and no line may hold NaN or
infinity (one such row would turn every loss that touches it into NaN, steps later).

:func:`word_vector_width` reads only the first line: the width ``d`` a model's embedding must
have, checked before anything is loaded or trained.

GloVe 6B is lower-cased and uses plain ``( ) / *`` where SST writes ``-LRB- -RRB- \\/ \\*``. By
default each vocabulary word is therefore looked up as written, lower-cased, with PTB escapes
undone, and both; the first form found wins.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import numpy as np

from foldexp.data.errors import FormatError
from foldexp.data.ptb import PTB_ESCAPES, unescape_word
from foldexp.data.textfile import iter_lines
from foldexp.data.vocab import Vocabulary

__all__ = [
    "AlignedVectors",
    "align_word_vectors",
    "default_lookup_keys",
    "read_word_vectors",
    "word_vector_width",
]

_LOWER_ESCAPES = {e.lower(): c for e, c in PTB_ESCAPES.items() if e.lower() != e}


class AlignedVectors(NamedTuple):
    """Result of :func:`align_word_vectors`.

    Attributes:
        matrix: ``(len(vocab), d)`` float32; row ``i`` is the vector of ``vocab.word(i)``.
        coverage: Fraction of corpus token occurrences (weighted by ``vocab.counts``) whose word
            has a pre-trained vector; the fraction of vocabulary words when counts are absent.
            The unknown token and specials are not counted.
        missing: Vocabulary words without a pre-trained vector (they got random rows), in id
            order.
    """

    matrix: np.ndarray
    coverage: float
    missing: list[str]

    @property
    def width(self) -> int:
        """The vectors' width ``d`` (the embedding size they fit)."""
        return int(self.matrix.shape[1])


def default_lookup_keys(word: str) -> list[str]:
    """Return the forms of ``word`` to look up, in order of preference (see module docstring)."""
    plain = unescape_word(word)
    # A lower-cased vocabulary holds "-lrb-" rather than "-LRB-".
    for escaped, char in _LOWER_ESCAPES.items():
        if escaped in plain:
            plain = plain.replace(escaped, char)
    keys = [word, word.lower(), plain, plain.lower()]
    return list(dict.fromkeys(keys))  # drop repeats, keep the order of preference


def read_word_vectors(
    path: str | os.PathLike[str], words: set[str] | None = None
) -> tuple[dict[str, np.ndarray], int]:
    """Read a GloVe-format file.

    Args:
        path: A text file, gzipped or not (``.txt``, ``.txt.gz``).
        words: If given, only vectors of these words are converted and returned.

    Returns:
        ``(vectors, dim)``: a dict word -> float32 vector and the dimension ``d``. When a word
        occurs twice the first occurrence is kept (as GloVe consumers conventionally do).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        FormatError: A line has the wrong number of values (``d`` is set by the first line),
            a value is NaN or infinite (or too large for float32), or a converted value is not
            a number; the message names ``file:line``, the word and what was expected.
    """
    path = Path(path)
    vectors: dict[str, np.ndarray] = {}
    dim: int | None = None
    for number, line in iter_lines(path):
        if not line.strip():
            continue
        parts = line.rstrip(" ").split(" ")
        if dim is None:
            header = _header_width(parts)
            if header is not None:
                dim = header
                continue
            dim = len(parts) - 1
            if dim < 1:
                raise FormatError(_not_vectors(path, number, len(parts)))
        if len(parts) != dim + 1:
            raise FormatError(
                f"{path}:{number}: expected a word and {dim} values, got {len(parts) - 1} values"
            )
        word = parts[0]
        # Every spelling of NaN and infinity holds an "n", no finite number does: a cheap test
        # that covers the lines never converted, too.
        rest = line.partition(" ")[2]
        if "n" in rest or "N" in rest:
            _refuse_non_finite(path, number, parts[1:])
        if (words is None or word in words) and word not in vectors:
            try:
                with np.errstate(over="ignore"):  # an overflow is refused just below, by line
                    vector = np.array(parts[1:], dtype=np.float32)
            except ValueError:
                bad = next(k for k, p in enumerate(parts[1:], 1) if _as_float(p) is None)
                raise FormatError(
                    f"{path}:{number}: expected {dim} numbers after the word, but value "
                    f"{bad} is not a number"
                ) from None
            if not np.isfinite(vector).all():  # "1e999", or a value beyond float32's range
                _refuse_non_finite(path, number, parts[1:], vector)
            vectors[word] = vector
    if dim is None:
        raise FormatError(f"{path}: expected GloVe vectors ('word v1 ... vd'), got an empty file")
    return vectors, dim


def word_vector_width(path: str | os.PathLike[str]) -> int:
    """The width ``d`` of the vectors in a GloVe-format file, from its first line alone.

    Cheap whatever the file's size, so a trainer can compare it with ``model.embed_size`` before
    loading anything; :func:`read_word_vectors` still checks that every line has this width.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        FormatError: The file is empty, or its first line is neither ``word v1 ... vd`` nor a
            ``count d`` header.
    """
    path = Path(path)
    for number, line in iter_lines(path):
        if not line.strip():
            continue
        parts = line.rstrip(" ").split(" ")
        width = _header_width(parts)
        if width is None:
            width = len(parts) - 1
        if width < 1:
            raise FormatError(_not_vectors(path, number, len(parts)))
        return width
    raise FormatError(f"{path}: expected GloVe vectors ('word v1 ... vd'), got an empty file")


def _not_vectors(path: Path, number: int, fields: int) -> str:
    """The error for a line that is not ``word v1 ... vd``. Like every message about a data
    file, it names the place and the shape, never the text: the file may be anything
    (``dataset.word_vectors=/etc/passwd``), and an error ends up in logs."""
    return (
        f"{path}:{number}: expected GloVe vectors ('word v1 ... vd': a word, then numbers, "
        f"separated by spaces), got a line of {fields} space-separated field(s)"
    )


def _header_width(parts: list[str]) -> int | None:
    """``d`` of a word2vec-style ``count d`` header line, else ``None``."""
    if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
        return int(parts[1])
    return None


def _refuse_non_finite(
    path: Path, number: int, values: list[str], vector: np.ndarray | None = None
) -> None:
    """Raise naming the first value of the line that is NaN or infinite (if there is one)."""
    for i, text in enumerate(values):
        value = float(vector[i]) if vector is not None else _as_float(text)
        if value is not None and not np.isfinite(value):
            raise FormatError(
                f"{path}:{number}: expected {len(values)} finite numbers after the word, but "
                f"value {i + 1} is not finite (NaN or infinite, or beyond float32's range)"
            )


def _as_float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def align_word_vectors(
    path: str | os.PathLike[str],
    vocab: Vocabulary,
    *,
    seed: int = 0,
    scale: float = 0.1,
    lookup: Callable[[str], list[str]] = default_lookup_keys,
) -> AlignedVectors:
    """Build an embedding matrix for ``vocab`` from a GloVe-format file.

    Args:
        path: The vectors file, gzipped or not (``.txt``, ``.txt.gz``).
        vocab: The vocabulary whose ids index the rows.
        seed: Seed of the generator for rows without a pre-trained vector.
        scale: Those rows are drawn uniformly from ``[-scale, scale]`` (small next to GloVe's
            typical component size, so they do not dominate early training).
        lookup: Maps a vocabulary word to the file words to try, most preferred first.

    Returns:
        :class:`AlignedVectors` ``(matrix, coverage, missing)``.
    """
    candidates = {w: lookup(w) for w in vocab.words[1 + len(vocab.specials) :]}
    wanted = {key for keys in candidates.values() for key in keys}
    vectors, dim = read_word_vectors(path, wanted)

    rng = np.random.default_rng(seed)
    # Every row starts random (including unk and specials) so the result does not depend on
    # which words happen to be found.
    matrix = rng.uniform(-scale, scale, size=(len(vocab), dim)).astype(np.float32)
    missing: list[str] = []
    found_weight = total_weight = 0
    for word, keys in candidates.items():
        weight = vocab.counts.get(word, 1) if vocab.counts else 1
        total_weight += weight
        vector = next((vectors[k] for k in keys if k in vectors), None)
        if vector is None:
            missing.append(word)
        else:
            matrix[vocab.index(word)] = vector
            found_weight += weight
    coverage = found_weight / total_weight if total_weight else 0.0
    return AlignedVectors(matrix, coverage, missing)
