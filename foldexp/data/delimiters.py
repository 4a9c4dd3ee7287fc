"""Which separator a CSV of a user's uses: comma, tab or semicolon.

One answer for every reader of users' CSVs (molecules, texts, ``foldexp predict``'s inputs), so
a file that trains is a file that predicts. The header alone can mislead (a tab file whose
column names hold commas, ``logP, measured``), so a few rows after it vote too: a separator
counts when it splits the header and each of those rows into the same number of fields.
"""

from __future__ import annotations

import csv
import itertools
from collections.abc import Sequence

__all__ = ["DELIMITERS", "sample_lines", "sniff_delimiter", "sniff_text_delimiter", "table_width"]

DELIMITERS = (",", "\t", ";")  # comma first: it wins a tie


def sniff_delimiter(header_line: str, rows: Sequence[str] = ()) -> str:
    """The field separator of a CSV whose header is ``header_line``.

    Of the separators that split the header into several fields and each line of ``rows`` (a
    few lines after it) into as many, the one giving the most fields (comma on a tie). Without
    rows, or where none agrees, the header's most frequent separator (comma when none occurs or
    on a tie). Fields are read as CSV: a quoted separator does not count.
    """
    agreeing = [
        (width, -k)
        for k, d in enumerate(DELIMITERS)
        if (width := table_width(header_line, rows, d)) > 1
    ]
    if agreeing:
        return DELIMITERS[-max(agreeing)[1]]
    counts = [header_line.count(d) for d in DELIMITERS]
    return DELIMITERS[counts.index(max(counts))]


def sniff_text_delimiter(text: str, sample: int = 5) -> str:
    """``sniff_delimiter`` of a whole CSV text (``sample_lines``)."""
    return sniff_delimiter(*sample_lines(text, sample))


def sample_lines(text: str, sample: int = 5) -> tuple[str, list[str]]:
    """A CSV text's first line and its next ``sample`` non-blank lines."""
    lines = iter(text.splitlines())
    header = next(lines, "")
    return header, list(itertools.islice((x for x in lines if x.strip()), sample))


def table_width(header_line: str, rows: Sequence[str], delimiter: str) -> int:
    """How many fields the header and every one of ``rows`` have, read with ``delimiter``; 0
    when they differ, when there are no rows, or when a line is malformed."""
    width = _width(header_line, delimiter)
    return width if rows and all(_width(row, delimiter) == width for row in rows) else 0


def _width(line: str, delimiter: str) -> int:
    try:
        return len(next(csv.reader([line], delimiter=delimiter), []))
    except csv.Error:
        return 0
