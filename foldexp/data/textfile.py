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
(standard input), :func:`iter_lines` streams a large file (word vectors) line by line,
with the same checks, without holding it in memory, and :func:`bounded_lines` streams any
stream (``foldexp predict``'s file or standard input) in lines of at most a given size: a longer
line is skipped and reported as too long, so one enormous line costs its own row only.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from foldexp.data.errors import TextFileError

__all__ = ["GZIP_MAGIC", "bounded_lines", "decode_text", "iter_lines", "open_binary", "read_text"]

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


@contextlib.contextmanager
def open_binary(source: str | os.PathLike[str] | IO[bytes]) -> Iterator[IO[bytes]]:
    """``source`` (a path, or a binary stream such as standard input's, which is left open) as
    a binary stream, gunzipped as it is read when it starts with gzip's magic bytes."""
    with contextlib.ExitStack() as stack:
        if isinstance(source, (str, os.PathLike)):
            raw: IO[bytes] = stack.enter_context(open(source, "rb"))
        else:
            raw = source
        buffered: Any = raw if hasattr(raw, "peek") else io.BufferedReader(raw)  # type: ignore[arg-type]
        if buffered.peek(2)[:2] == GZIP_MAGIC:
            yield stack.enter_context(gzip.GzipFile(fileobj=buffered, mode="rb"))
        else:
            yield buffered


# A line ends at \r\n, \r or \n (as ``open(newline="")`` reads it), not at a form feed or U+2028.
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+")


def bounded_lines(
    stream: IO[bytes] | IO[str], source: str | os.PathLike[str], limit: int
) -> Iterator[tuple[int, str | None]]:
    """``(line number, line)`` of every line of ``stream`` (with its line break, as
    ``open(newline="")`` gives it: ``\\r\\n``, ``\\n`` or ``\\r`` alone), read as :func:`read_text`
    reads a file (UTF-8, a leading byte-order mark dropped; a text stream is taken as decoded)
    but never more than ``limit`` bytes (characters, for a text stream) at a time: a longer line
    is skipped to its end and given as ``(line number, None)``. Memory stays bounded by
    ``limit`` whatever the input.

    Raises:
        TextFileError: a byte that is not UTF-8 (``source:line:column``) or a damaged gzip
            stream, when it is reached.
    """
    number = 0
    try:
        for piece in _pieces(stream, limit):
            if piece is None:
                number += 1
                yield number, None
                continue
            text = _decoded(piece, source, number, first=number == 0)
            for line in _LINE.findall(text):
                number += 1
                yield number, line
    except _GZIP_ERRORS as exc:
        raise _damaged(source, exc) from None


def _pieces(stream: IO[bytes] | IO[str], limit: int) -> Iterator[Any]:
    """Whole lines of ``stream``, several at a time, at most ``limit + 1`` long; ``None`` for
    a line longer than ``limit``, read to its end and dropped.

    ``readline`` ends a piece only at ``\\n``: a file whose lines end at ``\\r`` alone (old
    Mac Excel) comes as one long piece, cut here after its last ``\\r`` (never its final
    character: a ``\\n`` may follow it) and the rest carried into the next piece.
    """
    carry: Any = stream.read(0)  # b"" or "": the stream's own type
    newline, cr = ("\n", "\r") if isinstance(carry, str) else (b"\n", b"\r")
    while True:
        if carry.endswith(newline):  # a whole line that followed a long one
            yield carry
            carry = carry[:0]
        read = stream.readline(limit + 1 - len(carry))
        piece, carry = carry + read, carry[:0]
        if not piece:
            return
        if not read or len(piece) <= limit or piece.endswith(newline):
            yield piece
            continue
        cut = piece.rfind(cr, 0, len(piece) - 1) + 1  # piece holds no \n: it did not end
        if cut:
            yield piece[:cut]
            carry = piece[cut:]
            continue
        yield None  # one line past the limit
        carry = _after_long_line(stream, limit, piece.endswith(cr), (newline, cr))


def _after_long_line(stream: IO[Any], limit: int, at_cr: bool, breaks: tuple[Any, Any]) -> Any:
    """Reads the rest of a line past the limit a piece at a time, dropping it; returns what
    the last read holds after the line's end (``at_cr``: the line ended at a ``\\r`` already,
    which a ``\\n`` may complete)."""
    newline, cr = breaks
    while rest := stream.readline(limit):
        if at_cr:
            return rest.removeprefix(newline)
        if (end := rest.find(cr) + 1) == 0:
            if rest.endswith(newline):
                return rest[:0]
            continue
        if end == len(rest):
            at_cr = True
            continue
        return rest[end + 1 :] if rest[end : end + 1] == newline else rest[end:]
    return stream.read(0)


def _decoded(piece: Any, source: str | os.PathLike[str], number: int, first: bool) -> str:
    """``piece`` as text; ``number`` lines came before it."""
    if isinstance(piece, str):
        return piece.removeprefix("\ufeff") if first else piece
    if first:
        piece = piece.removeprefix(_BOM)
    try:
        return piece.decode("utf-8")
    except UnicodeDecodeError as exc:
        within = piece.rfind(b"\r", 0, exc.start) + 1  # a line may end at \r alone
        line = number + 1 + piece.count(b"\r", 0, within)
        raise _not_utf8(source, line, piece[within : exc.start], piece[exc.start]) from None


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
