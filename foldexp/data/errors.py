"""Exceptions and warnings raised by :mod:`foldexp.data`.

Every error here is meant to be read by a person: it names the file (and where it makes sense the
line, column, CSV row or field) and says what was expected, so that a broken data file can be
fixed without a debugger.
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "DataError",
    "DataWarning",
    "DatasetNotFoundError",
    "FetchError",
    "FormatError",
    "MoleculeError",
    "TextFileError",
    "TreeParseError",
]


class DataError(Exception):
    """Base class of every error raised by :mod:`foldexp.data`."""


class DataWarning(UserWarning):
    """Something in the data was skipped or looks unusual; the message says what."""


class FormatError(DataError, ValueError):
    """A data file does not have the expected format (the message names file and line)."""


class TextFileError(FormatError):
    """A user's file cannot be read as text: a damaged gzip stream, or a byte that is not UTF-8
    (:mod:`foldexp.data.textfile`).

    Attributes:
        path: The file (or ``<stdin>``).
        line: 1-based line of the offending byte; ``None`` for a damaged gzip stream.
        column: 1-based column (in characters) of that byte; ``None`` with ``line``.
        message: What was expected, what was found and what to do, without the location.
    """

    def __init__(
        self, path: str | Path, line: int | None, column: int | None, message: str
    ) -> None:
        self.path = str(path)
        self.line = line
        self.column = column
        self.message = message
        where = self.path if line is None else f"{self.path}:{line}:{column}"
        super().__init__(f"{where}: {message}")

    def __reduce__(self):  # keep the exception picklable (multiprocessing, pytest-xdist)
        return (type(self), (self.path, self.line, self.column, self.message))


class TreeParseError(FormatError):
    """A PTB-style tree could not be parsed.

    Attributes:
        path: The file the text came from, or ``"<string>"`` for text passed directly.
        line: 1-based line number.
        column: 1-based column (in characters, not bytes) of the offending character.
        message: What was expected and what was found, without the location prefix.
    """

    def __init__(self, path: str | Path, line: int, column: int, message: str) -> None:
        self.path = str(path)
        self.line = line
        self.column = column
        self.message = message
        super().__init__(f"{self.path}:{line}:{column}: {message}")

    def __reduce__(self):  # keep the exception picklable (multiprocessing, pytest-xdist)
        return (type(self), (self.path, self.line, self.column, self.message))


class MoleculeError(FormatError):
    """A molecule CSV has invalid SMILES or unusable target values."""


class DatasetNotFoundError(DataError, FileNotFoundError):
    """A dataset is not present under the data directory; the message says how to get it."""


class FetchError(DataError):
    """Downloading or importing a dataset failed; the message says what to do instead."""
