"""Sequence datasets: the addition and multiplication problems, and SST as flat sentences.

Addition / multiplication (Hochreiter & Schmidhuber 1997, in the form used by Raffel & Ellis 2016,
"Feed-forward networks with attention can solve some long-term memory problems"): each example is
a sequence of ``(value, marker)`` pairs with values uniform in ``[0, 1]`` and exactly two markers
equal to 1 (all others 0); the target is the sum (addition) or product (multiplication) of the
two marked values. A prediction counts as correct when it is within 0.04 of the target
(:func:`accuracy_within`). Lengths are uniform in ``[min_len, max_len]``; the first marker lies in
the first half of the sequence and the second in the second half, so the model must carry
information across at least one half of the sequence.

Text classification from a CSV: :func:`read_text_csv` reads the text, label (and split) column of
every row of a CSV or gzipped CSV, with the line each row starts on for error messages;
:func:`tokenize` splits a text into words (or characters).
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from foldexp.data.delimiters import sniff_text_delimiter
from foldexp.data.errors import FormatError
from foldexp.data.textfile import read_text
from foldexp.data.trees import Tree

__all__ = [
    "TOKENIZERS",
    "SequenceExample",
    "TextRow",
    "accuracy_within",
    "addition_problem",
    "multiplication_problem",
    "pad_sequences",
    "read_text_csv",
    "sst_sentences",
    "tokenize",
]


class SequenceExample(NamedTuple):
    """One example of the addition or multiplication problem.

    Attributes:
        inputs: ``(T, 2)`` float32; column 0 the values, column 1 the markers (0 or 1).
        target: Sum or product of the two marked values.
    """

    inputs: np.ndarray
    target: float


def _marked_problem(
    n: int, min_len: int, max_len: int, seed: int, combine: str
) -> list[SequenceExample]:
    if not 2 <= min_len <= max_len:
        raise ValueError(f"need 2 <= min_len <= max_len, got min_len={min_len}, max_len={max_len}")
    if n < 0:
        raise ValueError(f"n must be non-negative, got {n}")
    rng = np.random.default_rng(seed)
    lengths = rng.integers(min_len, max_len + 1, size=n)
    examples = []
    for length in lengths.tolist():
        inputs = np.zeros((length, 2), dtype=np.float32)
        inputs[:, 0] = rng.random(length, dtype=np.float32)
        half = length // 2
        first = int(rng.integers(half))
        second = int(rng.integers(half, length))
        inputs[first, 1] = inputs[second, 1] = 1.0
        a, b = float(inputs[first, 0]), float(inputs[second, 0])
        target = a + b if combine == "sum" else a * b
        examples.append(SequenceExample(inputs, target))
    return examples


def addition_problem(
    n: int, min_len: int = 50, max_len: int = 55, seed: int = 0
) -> list[SequenceExample]:
    """Generate ``n`` addition-problem examples (target = sum of the two marked values).

    Args:
        n: Number of examples.
        min_len: Shortest sequence (at least 2).
        max_len: Longest sequence; lengths are uniform in ``[min_len, max_len]``.
        seed: Seed of the numpy generator.
    """
    return _marked_problem(n, min_len, max_len, seed, "sum")


def multiplication_problem(
    n: int, min_len: int = 50, max_len: int = 55, seed: int = 0
) -> list[SequenceExample]:
    """Generate ``n`` multiplication-problem examples (target = product of the marked values).

    Arguments as :func:`addition_problem`.
    """
    return _marked_problem(n, min_len, max_len, seed, "product")


def accuracy_within(pred: Iterable[float], target: Iterable[float], tol: float = 0.04) -> float:
    """Return the fraction of predictions with ``|pred - target| < tol``.

    Accepts lists, numpy arrays or CPU tensors (anything ``np.asarray`` takes).
    """
    p = np.asarray(pred, dtype=np.float64).reshape(-1)
    t = np.asarray(target, dtype=np.float64).reshape(-1)
    if p.shape != t.shape:
        raise ValueError(f"pred and target differ in size: {p.size} vs {t.size}")
    if p.size == 0:
        raise ValueError("accuracy_within needs at least one prediction")
    return float(np.mean(np.abs(p - t) < tol))


def pad_sequences(
    sequences: Sequence[np.ndarray], pad_value: float = 0.0
) -> tuple[np.ndarray, np.ndarray]:
    """Stack variable-length arrays into one ``(N, T_max, ...)`` array.

    Returns:
        ``(padded, lengths)``; ``lengths`` is int64 ``(N,)``.
    """
    if not sequences:
        raise ValueError("pad_sequences needs at least one sequence")
    lengths = np.array([len(s) for s in sequences], dtype=np.int64)
    first = np.asarray(sequences[0])
    out = np.full((len(sequences), int(lengths.max()), *first.shape[1:]), pad_value, first.dtype)
    for i, s in enumerate(sequences):
        out[i, : len(s)] = s
    return out, lengths


def sst_sentences(trees: Iterable[Tree]) -> list[tuple[list[str], int]]:
    """Flatten trees into ``(tokens, root_label)`` pairs (for sequence baselines on SST)."""
    return [([w for w in tree.words() if w is not None], tree.label) for tree in trees]


# ---------------------------------------------------------------------- text classification CSVs

#: The tokenizers :func:`tokenize` knows: words between whitespace, or every character.
TOKENIZERS = ("whitespace", "chars")


def tokenize(text: str, tokenizer: str = "whitespace", lowercase: bool = False) -> list[str]:
    """The tokens of ``text``: its whitespace-separated words (``"whitespace"``) or its
    characters, spaces included, without the surrounding whitespace (``"chars"``)."""
    if lowercase:
        text = text.lower()
    if tokenizer == "whitespace":
        return text.split()
    if tokenizer == "chars":
        return list(text.strip())
    raise ValueError(f"unknown tokenizer {tokenizer!r}; expected one of {', '.join(TOKENIZERS)}")


class TextRow(NamedTuple):
    """One CSV record: the line it starts on and its text, label and split cells (``None``
    where the row has no such cell)."""

    line: int
    text: str | None
    label: str | None
    split: str | None


def _cell(record: list[str], index: int | None) -> str | None:
    """The record's cell at ``index``; ``None`` for no such column or a short row."""
    return record[index] if index is not None and index < len(record) else None


def read_text_csv(
    path: str | os.PathLike[str],
    text_column: str,
    label_column: str,
    split_column: str | None = None,
) -> list[TextRow]:
    """Every non-blank record of a CSV (or CSV.gz, known by its magic bytes) with a header row,
    its separator (comma, tab or semicolon) found as for molecule CSVs (``delimiters.py``).

    Args:
        path: The file.
        text_column, label_column: Header names of the text and the label columns.
        split_column: Header name of a column naming each row's split, or ``None``.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        FormatError: The file is not UTF-8 (naming the line) or a damaged gzip file
            (``textfile``), is not valid CSV (naming the line), is empty, lacks a named column
            (listing the header's columns), or has a record with more fields than the header
            (naming its line).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist (expected a CSV or CSV.gz file)")
    text = read_text(path)
    delimiter = sniff_text_delimiter(text)
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    rows: list[TextRow] = []
    try:
        header = [name.strip() for name in next(reader, [])]
        if not header:
            raise FormatError(f"{path}: expected a CSV header row, got an empty file")
        wanted = [("text", text_column), ("label", label_column)]
        if split_column is not None:
            wanted.append(("split", split_column))
        where = {}
        for role, column in wanted:
            if column not in header:
                raise FormatError(
                    f"{path}: no column {column!r} (the {role} column); the header has "
                    f"{', '.join(repr(h) for h in header)}"
                )
            where[role] = header.index(column)
        start = reader.line_num + 1
        for record in reader:
            if len(record) > len(header):
                # An unquoted separator in the text: a later cell would be read as the label.
                raise FormatError(
                    f"{path}:{start}: {len(record)} fields, but the header has {len(header)}; "
                    f"quote a text that holds {delimiter!r}"
                )
            if any(cell.strip() for cell in record):
                text, label, split = (
                    _cell(record, where.get(r)) for r in ("text", "label", "split")
                )
                rows.append(TextRow(start, text, label, split))
            start = reader.line_num + 1
    except csv.Error as exc:
        raise FormatError(f"{path}:{reader.line_num}: not valid CSV: {exc}") from None
    return rows
