"""The config keys that name a CSV's columns, told when the file lacks one.

A reader (``foldexp.data``) says which column it expected and which the header has; it does not
know which ``dataset.*`` key named the column. ``missing_columns`` tells that, when a file of
one's own (or another file for ``foldexp eval``) has its columns under other names: the message
names the file, the column, the key that names it, the header's columns and the override that
points the key at one of them (``dataset.label_column=COL``, as ``foldexp train`` and ``eval``
both take it).

It is asked only once the reader has failed, so a file is read once when all is well.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from pathlib import Path

from foldexp.config.errors import ConfigError
from foldexp.data.delimiters import sniff_text_delimiter
from foldexp.data.molecule_csv import class_of
from foldexp.data.textfile import read_text

__all__ = ["csv_header", "missing_columns"]


def csv_header(path: str | Path) -> list[str] | None:
    """The names in the CSV's header row, its separator found as the readers find it; ``None``
    for a file that cannot be read as one (the reader has said why)."""
    try:
        text = read_text(path)
        reader = csv.reader(io.StringIO(text, newline=""), delimiter=sniff_text_delimiter(text))
        header = next(reader, None)
    except (OSError, ValueError, csv.Error):
        return None
    return [name.strip() for name in header] if header else None


def missing_columns(
    path: str | Path,
    keys: Mapping[str, str | Sequence[str]],
    otherwise: Mapping[str, str] | None = None,
) -> ConfigError | None:
    """The error naming the first column of ``keys`` (``dataset.*`` key → column, or columns for
    a list key such as ``dataset.targets``) that the header of ``path`` lacks; ``None`` when it
    has them all, or cannot be read (the reader's own error then stands). ``otherwise``: for a
    key, another way than naming a column (the split column: a random split)."""
    header = csv_header(path)
    if header is None:
        return None
    names = ", ".join(repr(name) for name in header)
    for key, wanted in keys.items():
        columns = [wanted] if isinstance(wanted, str) else list(wanted)
        absent = [c for c in columns if class_of(c, header)[0] not in header]  # COLUMN=CLASS
        if not absent:
            continue
        if isinstance(wanted, str):
            hint = f"{key}=COL"
        else:  # a list key: the present columns stay, each missing one is to be renamed
            hint = f"{key}=[{','.join(c if c in header else 'COL' for c in columns)}]"
        also = f" ({otherwise[key]})" if otherwise and key in otherwise else ""
        return ConfigError(
            f"{path}: no column {absent[0]!r}, which {key} names; the header has {names}. "
            f"Name the file's column with {hint}{also}"
        )
    return None
