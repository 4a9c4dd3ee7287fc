"""Reading a user's text file: one reader, one behaviour and one wording for every file format.

Every file a user brings -- molecule and text CSVs, PTB tree files, word vectors, ``foldexp
predict``'s inputs -- is untrusted, and is read as text here and nowhere else:

* gzip is recognised by its magic bytes (``1f 8b``), whatever the file is called; a damaged or
  truncated gzip stream fails naming the file;
* the text is UTF-8; a byte-order mark at its start is dropped;
* a byte that is not UTF-8 fails naming ``file:line:column``, the byte, and what to do.

Both failures are a :class:`~foldexp.data.errors.TextFileError` (a ``FormatError``, so a
``ValueError`` too), which keeps the place apart from the message so that a reader may name
another file (``fetch`` names the user's file, not its staged copy).

:func:`read_text` gives a whole file, :func:`decode_text` the same for bytes already read
(standard input), and :func:`iter_lines` streams a large file (word vectors) line by line,
with the same checks, without holding it in memory.
"""

from __future__ import annotations

import gzip
import os
import zlib
from collections.abc import Iterator
from pathlib import Path

from foldexp.data.errors import TextFileError

__all__ = ["GZIP_MAGIC", "decode_text", "iter_lines", "read_text"]

GZIP_MAGIC = b"\x1f\x8b"
_BOM = b"\xef\xbb\xbf"
# What a damaged gzip stream raises: a bad header or CRC (BadGzipFile), a truncated stream
# (EOFError), corrupt deflate data (zlib.error). Not OSError at large: a disk failing is not this.
_GZIP_ERRORS = (gzip.BadGzipFile, EOFError, zlib.error)


def read_text(path: str | os.PathLike[str]) -> str:
    """The text of ``path``: gunzipped when it starts with gzip's magic bytes, decoded as UTF-8
    without a byte-order mark.

    Raises:
        FileNotFoundError: ``path`` does not exist (and other ``OSError`` of reading it).
        TextFileError: A damaged gzip stream, or a byte that is not UTF-8 (``file:line:col``).
    """
    return decode_text(Path(path).read_bytes(), path)


def decode_text(data: bytes, source: str | os.PathLike[str]) -> str:
    """:func:`read_text` of bytes already read; ``source`` names them in an error."""
    if data[:2] == GZIP_MAGIC:
        try:
            data = gzip.decompress(data)
        except _GZIP_ERRORS as exc:
            raise _damaged(source, exc) from None
    data = data.removeprefix(_BOM)  # not "utf-8-sig": its errors count bytes after the mark
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        start = data.rfind(b"\n", 0, exc.start) + 1
        raise _not_utf8(source, line, data[start : exc.start], data[exc.start]) from None


def iter_lines(path: str | os.PathLike[str]) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of every line of ``path``, without its line break (``\\n`` or
    ``\\r\\n``), read as :func:`read_text` reads it but one line at a time: the file is never
    held in memory whole. The errors are :func:`read_text`'s, raised when the bad line or the
    damaged part of a gzip stream is reached.
    """
    path = Path(path)
    with open(path, "rb") as raw:
        gzipped = raw.read(2) == GZIP_MAGIC
        raw.seek(0)
        stream = gzip.GzipFile(fileobj=raw, mode="rb") if gzipped else raw
        try:
            for number, line in enumerate(stream, start=1):
                if number == 1:
                    line = line.removeprefix(_BOM)
                try:
                    text = line.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise _not_utf8(path, number, line[: exc.start], line[exc.start]) from None
                yield number, text.removesuffix("\n").removesuffix("\r")
        except _GZIP_ERRORS as exc:  # raised by the gzip stream alone
            raise _damaged(path, exc) from None


def _damaged(source: str | os.PathLike[str], exc: BaseException) -> TextFileError:
    reason = str(exc) or type(exc).__name__
    return TextFileError(
        source,
        None,
        None,
        f"a damaged gzip file (it starts with gzip's magic bytes but does not decompress: "
        f"{reason}); copy it again, or give it uncompressed",
    )


def _not_utf8(source: str | os.PathLike[str], line: int, before: bytes, byte: int) -> TextFileError:
    """The error for ``byte``, preceded on its line by ``before``."""
    column = len(before.decode("utf-8", errors="replace")) + 1
    return TextFileError(
        source,
        line,
        column,
        f"expected UTF-8 text, got byte 0x{byte:02x}; save the file as UTF-8",
    )
