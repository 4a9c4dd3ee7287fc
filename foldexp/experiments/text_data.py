"""Sentences of one's own: a text-classification CSV as a dataset (``dataset=text_csv``).

Each row of the CSV (or CSV.gz) gives a text and its label; a text becomes its tokens (words
between whitespace, or characters) and an example is ``(tokens, class_id)``, what the sequence
LSTM (``foldexp.models.sequence``) and ``sst_sentences`` use. Labels are integers ``0..K-1``
(``K`` the largest plus one), or names, which become class ids in sorted order; either way
``bundle.info["class_names"]`` names the classes. The split is random (``fractions``, ``seed``) or
given by a column (``train``, ``valid``/``dev``/``validation``, ``test``).

A row with an empty text, no label, or an unknown split name is refused naming the file and
line (``on_invalid=error``), or skipped with one warning giving the count and the first rows
(``on_invalid=skip``). ``text_inputs`` turns texts into examples for ``foldexp predict``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from foldexp.config import MAX_CLASSES
from foldexp.config import enum_value as plain
from foldexp.config.errors import ConfigError
from foldexp.data.errors import FormatError
from foldexp.data.sequences import TextRow, read_text_csv, tokenize
from foldexp.data.splits import random_split
from foldexp.data.trees import NO_LABEL
from foldexp.data.vocab import Vocabulary
from foldexp.experiments.csv_columns import missing_columns
from foldexp.experiments.datasets import DataBundle, _pretrained

__all__ = ["SPLIT_NAMES", "text_csv", "text_inputs"]

log = logging.getLogger(__name__)

#: Values of ``split_column`` and the split each names (compared lower-cased).
SPLIT_NAMES = {"train": 0, "dev": 1, "valid": 1, "validation": 1, "val": 1, "test": 2}
_INTEGER = re.compile(r"[+-]?[0-9]+")
_SHOWN = 3  # skipped rows named in the warning

Example = tuple[list[str], int]


def _problem(row: TextRow, tokens: list[str], columns: tuple[str, str, str | None]) -> str | None:
    """Why ``row`` cannot be an example, or ``None``."""
    text_column, label_column, split_column = columns
    if row.text is None or not tokens:
        return f"empty text in column {text_column!r}"
    if row.label is None or not row.label.strip():
        return f"no label in column {label_column!r}"
    if split_column is not None and (row.split or "").strip().lower() not in SPLIT_NAMES:
        return (
            f"split {row.split!r} in column {split_column!r}; expected train, valid (or dev, "
            "validation) or test"
        )
    return None


def _valid_rows(
    path: str,
    rows: list[TextRow],
    columns: tuple[str, str, str | None],
    tokenizer: str,
    lowercase: bool,
    on_invalid: str,
) -> list[tuple[TextRow, list[str]]]:
    """The rows that make examples, with their tokens; refuses or skips the others."""
    kept, skipped = [], []
    for row in rows:
        tokens = tokenize(row.text or "", tokenizer, lowercase)
        why = _problem(row, tokens, columns)
        if why is None:
            kept.append((row, tokens))
        elif on_invalid == "error":
            raise FormatError(f"{path}:{row.line}: {why} (dataset.on_invalid=skip skips such rows)")
        else:
            skipped.append(f"line {row.line}: {why}")
    if skipped:
        first = "; ".join(skipped[:_SHOWN])
        more = f" and {len(skipped) - _SHOWN} more" if len(skipped) > _SHOWN else ""
        log.warning("%s: skipped %d invalid row(s) (%s%s)", path, len(skipped), first, more)
    if not kept:
        raise FormatError(f"{path}: no row holds both a text and a label")
    return kept


def _known_classes(path: str, labels: list[str], lines: list[int], known: list[str]) -> list[int]:
    """Class ids of ``labels`` among a trained run's classes ``known`` (its ``class_names``):
    a file scored by ``foldexp eval`` may hold some of them only."""
    index = {name: k for k, name in enumerate(known)}
    ids_are_names = known == [str(k) for k in range(len(known))]
    ids = []
    for label, line in zip(labels, lines):
        k = index.get(label)
        if k is None and ids_are_names and _INTEGER.fullmatch(label):
            k = int(label) if 0 <= int(label) < len(known) else None  # "+1", "01"
        if k is None:
            raise FormatError(
                f"{path}:{line}: label {label!r} is not one of the trained run's classes "
                f"({', '.join(known)})"
            )
        ids.append(k)
    return ids


def _classes(path: str, labels: list[str], lines: list[int]) -> tuple[list[int], list[str]]:
    """Class ids and class names: integer labels as they are (names ``"0"``, ``"1"``, ...),
    otherwise the sorted distinct names."""
    if all(_INTEGER.fullmatch(label) for label in labels):
        ids = [int(label) for label in labels]
        for value, line in zip(ids, lines):
            if not 0 <= value < MAX_CLASSES:  # names and logits are made for 0..value
                raise FormatError(
                    f"{path}:{line}: label {value}; integer labels are class ids 0..K-1, "
                    f"K <= {MAX_CLASSES} (or use names: any label that is not an integer makes "
                    "every label a name)"
                )
        names = [str(k) for k in range(max(ids) + 1)]
        missing = sorted(set(range(len(names))) - set(ids))
        if missing:
            log.warning(
                "%s: classes %s have no rows (integer labels are class ids 0..%d)",
                path,
                missing,
                len(names) - 1,
            )
    else:
        names = sorted(set(labels))
        index = {name: k for k, name in enumerate(names)}
        ids = [index[label] for label in labels]
    if len(names) < 2:
        raise FormatError(f"{path}: every row has the label {names[0]!r}; a classifier needs two")
    return ids, names


def _split(
    examples: list[Example],
    rows: list[TextRow],
    split: str,
    fractions: Sequence[float],
    seed: int,
) -> list[list[Example]]:
    if split == "column":
        parts: list[list[Example]] = [[], [], []]
        for example, row in zip(examples, rows):
            parts[SPLIT_NAMES[(row.split or "").strip().lower()]].append(example)
        return parts
    if len(fractions) != 3 or abs(sum(fractions) - 1.0) > 1e-6:
        raise ConfigError(
            f"dataset.fractions={list(fractions)}; expected three shares summing to 1"
        )
    return [[examples[i] for i in part] for part in random_split(len(examples), fractions, seed)]


def text_csv(
    path: str,
    name: str = "text_csv",
    text_column: str = "text",
    label_column: str = "label",
    tokenizer: str = "whitespace",
    lowercase: bool = False,
    min_count: int = 1,
    word_vectors: str | None = None,
    split: str = "random",
    split_column: str = "split",
    fractions: Sequence[float] = (0.8, 0.1, 0.1),
    seed: int = 0,
    on_invalid: str = "error",
    limit: int = 0,
    trained: Mapping[str, Any] | None = None,
) -> DataBundle:
    """Sentence classification from a CSV (see the module docstring; keys as ``dataset.*``).

    ``bundle.info``: ``vocab``, ``num_classes``, ``class_names`` and ``embeddings`` (or
    ``None``). ``trained``: a trained run's ``info`` (``foldexp eval``): labels are looked up
    among its ``class_names``, so a file may hold one class, or some, and keep the run's ids.
    """
    tokenizer, split, on_invalid = str(plain(tokenizer)), str(plain(split)), str(plain(on_invalid))
    if path in ("", "???"):
        raise ConfigError(
            "dataset.path is not set: give the CSV or CSV.gz file (dataset.path=FILE)"
        )
    columns = (text_column, label_column, split_column if split == "column" else None)
    try:
        rows = read_text_csv(Path(path).expanduser(), *columns)
    except FormatError:
        keys = {"dataset.text_column": text_column, "dataset.label_column": label_column}
        if columns[2] is not None:
            keys["dataset.split_column"] = split_column
        random = {"dataset.split_column": "or cut the file at random: dataset.split=random"}
        named = missing_columns(Path(path).expanduser(), keys, random)
        if named is not None:
            raise named from None
        raise
    kept = _valid_rows(path, rows, columns, tokenizer, lowercase, on_invalid)
    labels = [row.label.strip() for row, _ in kept]  # type: ignore[union-attr]  # checked
    lines = [row.line for row, _ in kept]
    known = list(trained.get("class_names") or []) if trained else []
    if known:
        ids, names = _known_classes(path, labels, lines, [str(n) for n in known]), known
    else:
        ids, names = _classes(path, labels, lines)
    examples = [(tokens, k) for (_, tokens), k in zip(kept, ids)]
    parts = _split(examples, [row for row, _ in kept], split, fractions, seed)
    if limit:
        parts = [p[:limit] for p in parts]
    vocab = Vocabulary.from_tokens(
        (w for words, _ in parts[0] for w in words), lowercase=lowercase, min_count=min_count
    )
    log.info("%s: %d classes (%s)", name, len(names), ", ".join(names[:10]))
    return DataBundle(
        *parts,
        {
            "vocab": vocab,
            "num_classes": len(names),
            "class_names": names,
            "embeddings": _pretrained(word_vectors, vocab),
        },
    )


def text_inputs(
    texts: list[str], tokenizer: Any = "whitespace", lowercase: bool = False
) -> list[tuple[Example | None, str | None]]:
    """Each text as ``((tokens, -1), None)``, or ``(None, why)`` when it has no tokens (or is
    not text); never raises. ``tokenizer`` and ``lowercase`` as the run's dataset."""
    tokenizer = str(plain(tokenizer))
    out: list[tuple[Example | None, str | None]] = []
    for text in texts:
        if not isinstance(text, str):
            out.append((None, f"expected text, got {type(text).__name__}"))
            continue
        try:
            tokens = tokenize(text, tokenizer, lowercase)
        except ValueError as exc:
            out.append((None, str(exc)))
            continue
        out.append(((tokens, NO_LABEL), None) if tokens else (None, "empty text"))
    return out
