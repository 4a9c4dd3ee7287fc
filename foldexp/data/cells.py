"""Table cells safe to open: CSV cells a spreadsheet will not run, markdown cells that stay cells.

Every CSV foldexp writes (``predict``'s output, ``metrics.csv``, ``ranks.csv``, ``report.csv``,
``summary.csv``, ``bench.csv``) may carry text from a file a user did not write: an input
SMILES or sentence, a column name, a sweep's ``overrides.yaml``, a checkpoint's history. A
spreadsheet runs a cell that begins with ``=``, ``+``, ``-`` or ``@`` as a formula
(``=cmd|' /C calc'!A0``, ``=HYPERLINK(...)``), and a tab or carriage return at the start can
smuggle one past a filter; so a text cell that begins with one of them gets a single quote in
front (OWASP's "CSV injection" rule), which the spreadsheet shows as text. A number written as
text (``-1.5``, ``+2``) is left alone: as a formula it only gives itself. Numbers that are not
text are never changed.

A markdown table (``report.md``, ``summary.md``, ``ensemble.md``, ``bench.md``) breaks at a
``|`` or a line break inside a cell: ``|`` is escaped as ``\\|`` and line breaks become spaces.

One helper for every writer: ``spreadsheet_cell`` / ``spreadsheet_row`` / ``spreadsheet_frame``
for CSVs, ``markdown_cell`` / ``markdown_frame`` for markdown.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd

__all__ = [
    "FORMULA_STARTS",
    "markdown_cell",
    "markdown_frame",
    "spreadsheet_cell",
    "spreadsheet_frame",
    "spreadsheet_row",
]

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # what a spreadsheet may read as a formula


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def spreadsheet_cell(value: Any) -> Any:
    """``value``, or for a text that a spreadsheet would run as a formula, the text behind a
    single quote (``'=HYPERLINK(...)``). Anything but a string passes through."""
    if not isinstance(value, str) or not value.startswith(FORMULA_STARTS):
        return value
    if value[0] in "+-" and _is_number(value):
        return value
    return "'" + value


def spreadsheet_row(row: Iterable[Any]) -> list[Any]:
    """``spreadsheet_cell`` of every cell of a CSV row (a header is a row too)."""
    return [spreadsheet_cell(cell) for cell in row]


def spreadsheet_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``frame`` to write as CSV: its column names and its text cells neutralised
    (``spreadsheet_cell``); numeric columns are untouched."""
    return _map_text(
        frame.rename(columns=lambda name: spreadsheet_cell(str(name))), spreadsheet_cell
    )


def markdown_cell(value: Any) -> Any:
    """``value`` fit for a markdown table cell: ``|`` escaped, line breaks as spaces; anything
    but a string passes through (its formatting is the table's)."""
    if not isinstance(value, str):
        return value
    return " ".join(value.replace("|", "\\|").splitlines())


def markdown_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``frame`` whose column names and text cells are ``markdown_cell``s."""
    return _map_text(frame.rename(columns=lambda name: markdown_cell(str(name))), markdown_cell)


def _map_text(frame: pd.DataFrame, cell: Any) -> pd.DataFrame:
    """``frame`` with ``cell`` applied to every column that may hold text (pandas' ``str``
    columns, and ``object`` ones of mixed values); numeric columns are left as they are."""
    for k in range(frame.shape[1]):
        column = frame.iloc[:, k]
        if column.dtype == object or pd.api.types.is_string_dtype(column.dtype):
            frame.isetitem(k, column.map(cell, na_action="ignore"))
    return frame
