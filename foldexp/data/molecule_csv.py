"""Reading a molecule CSV: gzip or plain, UTF-8, comma, tab or semicolon, one molecule a row.

``read_molecule_rows`` gives the row numbers, SMILES, targets and target mask of a file and
refuses what cannot be trained on, naming the file and the line, row or column: text that is
not UTF-8, a damaged gzip stream, a missing column, a row of the wrong width, a header without
data rows, a target that is not a number or does not fit float32 (``inf``, ``1e39``), a target
column with no value at all. Empty, ``nan`` or ``NA`` targets are missing (``MISSING``).
Featurising the molecules and caching them is ``molecules.py``.

A molecule past a size limit costs its row, never the file: ``MAX_SMILES_CHARS`` and
``MAX_ATOMS`` are the defaults of ``dataset.max_smiles_chars`` and ``dataset.max_atoms``. A
molecule's pair features take atoms² × 14 floats, so the atom limit is what bounds memory: 1,000
atoms (56 MB of pair features) covers drug-like molecules (under 100 heavy atoms), the largest
natural products (maitotoxin: 236) and peptides such as insulin (about 400). A SMILES of 20,000
characters writes 1,000 atoms with room for brackets, charges, stereo marks and ring numbers.
Python's CSV reader refuses a field over 131,072 characters by default; it is raised to the
configured maximum, and a record with a longer field is that row's error (``too_long``).
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np

from foldexp.data.delimiters import sniff_text_delimiter
from foldexp.data.errors import FormatError, MoleculeError
from foldexp.data.textfile import read_text

__all__ = [
    "class_of",
    "MAX_ATOMS",
    "MAX_SMILES_CHARS",
    "MISSING",
    "DEFAULT_FIELD_LIMIT",
    "allow_fields",
    "field_limit",
    "read_csv_column",
    "read_molecule_rows",
    "record_lines",
]

MAX_ATOMS = 1_000  # default of dataset.max_atoms (see the module docstring)
MAX_SMILES_CHARS = 20_000  # default of dataset.max_smiles_chars

MISSING = {"", "nan", "na", "n/a", "none", "null"}  # a target field holding no value
_FLOAT32_MAX = float(np.finfo(np.float32).max)


#: Python's CSV field limit by default: the longest field a record may hold, unless
#: ``dataset.max_smiles_chars`` is higher (``field_limit``).
DEFAULT_FIELD_LIMIT = 131_072


def field_limit(max_smiles_chars: int) -> int:
    """The longest field a molecule CSV's record may hold before the record is its row's error."""
    return max(DEFAULT_FIELD_LIMIT, max_smiles_chars)


def allow_fields(characters: int) -> None:
    """Raises Python's CSV field limit (131,072 characters by default, one limit for the whole
    process) to ``characters`` if it is lower."""
    csv.field_size_limit(max(csv.field_size_limit(), characters))


def _records(
    path: Path, max_field: int = MAX_SMILES_CHARS
) -> tuple[list[str], Iterator[tuple[int, int, list[str] | None]]]:
    """The header (stripped names) and ``(row number, line, fields)`` of every data record;
    ``fields`` is ``None`` for a record with a field longer than ``field_limit(max_field)``
    characters: that row's error, not the file's.

    Row numbers count records after the header from 1 (blank records included, so a row number
    is stable); blank records themselves are not yielded. ``line`` is the line the record
    starts on: a quoted field may hold line breaks, so row ``r`` need not be on line ``r + 1``.
    """
    text = read_text(path)
    limit = field_limit(max_field)
    # The reader's own limit is raised past the whole text and the fields measured here: a
    # reader stopped by its limit goes on at the next line, inside the long field when that
    # field is quoted across lines, and would misread every record after it.
    allow_fields(max(limit, len(text) + 1))
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=sniff_text_delimiter(text))
    try:
        header = next(reader, None)
    except csv.Error as exc:
        raise FormatError(f"{path}:1: malformed CSV header: {exc}") from None
    if header is None:
        raise MoleculeError(f"{path}: expected a CSV header line, got an empty file")
    if not any(h.strip() for h in header):
        raise MoleculeError(f"{path}:1: expected a CSV header line, got a blank line")

    def rows() -> Iterator[tuple[int, int, list[str] | None]]:
        start = reader.line_num + 1  # line_num: the last line read, where a record ends
        row_number = 0
        while True:
            row_number += 1
            try:
                record: list[str] | None = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:
                raise FormatError(f"{path}:{reader.line_num}: malformed CSV: {exc}") from None
            if any(len(field) > limit for field in record):
                record = None
            if record is None or any(x.strip() for x in record):  # a blank line holds no data
                yield row_number, start, record
            start = reader.line_num + 1

    return [h.strip() for h in header], rows()


def _column_indices(path: Path, header: list[str], columns: Sequence[str]) -> list[int]:
    missing = [c for c in columns if c not in header]
    if missing:
        raise MoleculeError(
            f"{path}:1: expected column(s) {missing} in the header; the columns are {header}"
        )
    twice = sorted({c for c in columns if columns.count(c) > 1 or header.count(c) > 1})
    if twice:
        raise MoleculeError(
            f"{path}:1: column(s) {twice} named twice (in the header or in the columns asked "
            f"for): which one is meant is ambiguous; the columns are {header}"
        )
    return [header.index(c) for c in columns]


def _target_value(path: Path, line: int, row: int, name: str, text: str) -> float | None:
    """A target field as a float, ``None`` when missing; refuses what float32 cannot hold."""
    if text.lower() in MISSING:
        return None
    try:
        value = float(text)
    except ValueError:
        raise MoleculeError(
            f"{path}:{line}: row {row}, column {name!r}: "
            f"expected a number or an empty field, got {text!r}"
        ) from None
    if math.isnan(value):
        return None
    if not abs(value) <= _FLOAT32_MAX:  # inf, or finite but beyond float32 (1e39)
        raise MoleculeError(
            f"{path}:{line}: row {row}, column {name!r}: expected a finite number within "
            f"float32's range (|x| <= {_FLOAT32_MAX:.3g}), got {text!r}"
        )
    return value


def class_of(name: str, header: Sequence[str]) -> tuple[str, str | None]:
    """``(column, class)`` of a target name: ``(name, None)`` for a column of numbers; for
    ``COLUMN=CLASS`` (a column of class names as one 0/1 target per class, ``experiments/
    molecule_targets.py``) where ``name`` is no column but ``COLUMN`` is, ``(COLUMN, CLASS)``."""
    if name in header:
        return name, None
    for k, char in enumerate(name):
        if char == "=" and name[:k] in header:
            return name[:k], name[k + 1 :]
    return name, None


def _class_value(text: str, label: str) -> float | None:
    """1 where the row's class is ``label``, 0 for another class, ``None`` where missing."""
    return None if text.lower() in MISSING else float(text == label)


def read_molecule_rows(
    path: Path,
    smiles_column: str,
    target_columns: Sequence[str],
    max_smiles_chars: int = MAX_SMILES_CHARS,
) -> tuple[list[int], list[str], np.ndarray, np.ndarray, set[int]]:
    """Return data rows, SMILES, targets, mask and the rows too long to read (a field over
    ``max_smiles_chars``: their SMILES is empty, their targets missing) from a CSV; errors name
    file, row and column."""
    header, records = _records(path, max_smiles_chars)
    columns, classes = zip(*(class_of(name, header) for name in target_columns), strict=True)
    # a column of classes gives several targets (read once); any other column is asked once
    classed = list(dict.fromkeys(c for c, label in zip(columns, classes) if label is not None))
    asked = [c for c, label in zip(columns, classes) if label is None] + classed
    _column_indices(path, header, (smiles_column, *asked))
    s_col, t_cols = header.index(smiles_column), [header.index(c) for c in columns]
    rows, smiles, values, mask = [], [], [], []
    too_long: set[int] = set()
    for row_number, line, record in records:
        if record is None:
            too_long.add(row_number)
            rows.append(row_number)
            smiles.append("")
            values.append([0.0] * len(target_columns))
            mask.append([False] * len(target_columns))
            continue
        if len(record) != len(header):
            raise MoleculeError(
                f"{path}:{line}: row {row_number}: expected {len(header)} fields, got {len(record)}"
            )
        rows.append(row_number)
        smiles.append(record[s_col].strip())
        parsed = [
            _target_value(path, line, row_number, name, record[col].strip())
            if label is None
            else _class_value(record[col].strip(), label)
            for name, col, label in zip(target_columns, t_cols, classes, strict=True)
        ]
        values.append([0.0 if v is None else v for v in parsed])
        mask.append([v is not None for v in parsed])
    if not rows:
        raise MoleculeError(f"{path}: has a header but no data rows; expected one molecule a row")
    n_targets = len(target_columns)
    targets = np.array(values, dtype=np.float32).reshape(-1, n_targets)
    target_mask = np.array(mask, dtype=bool).reshape(-1, n_targets)
    empty = [name for name, any_value in zip(target_columns, target_mask.any(0)) if not any_value]
    if empty:
        raise MoleculeError(
            f"{path}: target column(s) {empty} hold no value in any of the {len(rows)} rows; "
            "expected numbers (empty fields are missing values)"
        )
    return rows, smiles, targets, target_mask, too_long


def read_csv_column(path: str | os.PathLike[str], column: str) -> dict[int, str]:
    """One column of a CSV as ``{row number: stripped value}``, rows numbered as
    :func:`load_molecule_csv` numbers them (``MoleculeDataset.rows``)."""
    path = Path(path)
    header, records = _records(path)
    (col,) = _column_indices(path, header, (column,))
    out = {}
    for row_number, line, record in records:
        if record is None:
            continue  # too long to read: an invalid row, which no split keeps
        if len(record) != len(header):
            raise MoleculeError(
                f"{path}:{line}: row {row_number}: expected {len(header)} fields, got {len(record)}"
            )
        out[row_number] = record[col].strip()
    return out


def record_lines(path: str | os.PathLike[str], rows: Iterable[int]) -> dict[int, int]:
    """The line each of ``rows`` (row numbers as :func:`read_molecule_rows` gives them) starts
    on, for an error that names rows: a quoted field may hold line breaks, so row ``r`` is not
    always on line ``r + 1``. Reads the file up to the last of them."""
    wanted = {int(r) for r in rows}
    found: dict[int, int] = {}
    if wanted:
        for row_number, line, _ in _records(Path(path))[1]:
            if row_number in wanted:
                found[row_number] = line
                if len(found) == len(wanted):
                    break
    return found
