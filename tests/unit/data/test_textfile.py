"""``foldexp.data.textfile``: a user's text file read one way -- gzip by its magic bytes, UTF-8
with a byte-order mark dropped, a non-UTF-8 byte or a damaged gzip stream refused naming where --
whole (``read_text``, ``decode_text``) or streamed line by line (``iter_lines``)."""

from __future__ import annotations

import gzip
import pickle
import re
from pathlib import Path

import pytest

from foldexp.data.errors import FormatError, TextFileError
from foldexp.data.textfile import decode_text, iter_lines, read_text

TEXT = "first\r\nsecond line\n\nlast"


def _files(tmp_path: Path, data: bytes) -> list[Path]:
    """``data`` as it is, and gzipped under a name that does not say so."""
    plain, packed = tmp_path / "plain.txt", tmp_path / "packed.txt"
    plain.write_bytes(data)
    packed.write_bytes(gzip.compress(data))
    return [plain, packed]


def test_whole_and_streamed_text_agree_gzipped_or_not_with_or_without_a_bom(
    tmp_path: Path,
) -> None:
    for data in (TEXT.encode(), b"\xef\xbb\xbf" + TEXT.encode()):
        for path in _files(tmp_path, data):
            assert read_text(path) == TEXT
            assert list(iter_lines(path)) == [
                (1, "first"),
                (2, "second line"),
                (3, ""),
                (4, "last"),
            ]
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    assert read_text(empty) == "" and list(iter_lines(empty)) == []


@pytest.mark.parametrize(
    ("data", "line", "column", "byte"),
    [
        (b"ab\xe9\n", 1, 3, "e9"),
        (b"\xef\xbb\xbfab\xe9\n", 1, 3, "e9"),  # the byte-order mark is not a column
        (b"one\ntwo\ncaf\xc3\xa9 \xe9t\xe9\n", 3, 6, "e9"),  # columns count characters
        (b"a\r\n\xff\r\n", 2, 1, "ff"),
    ],
)
def test_a_byte_that_is_not_utf8_names_its_line_and_column(
    tmp_path: Path, data: bytes, line: int, column: int, byte: str
) -> None:
    for path in _files(tmp_path, data):
        expected = (
            rf"^{re.escape(str(path))}:{line}:{column}: expected UTF-8 text, got byte "
            rf"0x{byte}; save the file as UTF-8$"
        )
        with pytest.raises(TextFileError, match=expected) as whole:
            read_text(path)
        with pytest.raises(TextFileError, match=expected):
            list(iter_lines(path))
        assert (whole.value.line, whole.value.column) == (line, column)
        assert isinstance(whole.value, FormatError) and isinstance(whole.value, ValueError)


@pytest.mark.parametrize(
    "damage",
    [
        lambda z: z[: len(z) // 2],  # truncated
        lambda z: z[:10] + b"\x00" * 8 + z[18:],  # corrupt deflate data
        lambda z: z[:-8] + b"\x00\x00\x00\x00" + z[-4:],  # wrong CRC
        lambda z: z[:2] + b"\x07" + z[3:],  # an unknown compression method
    ],
)
def test_a_damaged_gzip_stream_names_the_file(tmp_path: Path, damage) -> None:
    path = tmp_path / "vectors.txt"  # gzip known by its bytes: the name does not say so
    path.write_bytes(damage(gzip.compress(b"the 0.1 0.2\n" * 2000)))
    expected = rf"^{re.escape(str(path))}: a damaged gzip file \(it starts with gzip's magic"
    with pytest.raises(TextFileError, match=expected) as whole:
        read_text(path)
    assert whole.value.line is None
    with pytest.raises(TextFileError, match=expected):
        for _ in iter_lines(path):
            pass


def test_lines_are_streamed_not_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "big.gz"
    path.write_bytes(gzip.compress(b"ok\n" * 10 + b"\xff\n") + b"not read")
    lines = iter_lines(path)
    assert [next(lines) for _ in range(10)] == [(n, "ok") for n in range(1, 11)]
    with pytest.raises(TextFileError, match=r"big\.gz:11:1: expected UTF-8"):
        next(lines)


def test_bytes_already_read_are_named_by_their_source() -> None:
    assert decode_text(gzip.compress(b"\xef\xbb\xbfa\nb\n"), "<stdin>") == "a\nb\n"
    with pytest.raises(TextFileError, match=r"^<stdin>:2:1: expected UTF-8 text, got byte 0xe9"):
        decode_text(b"a\n\xe9\n", "<stdin>")
    with pytest.raises(TextFileError, match=r"^<stdin>: a damaged gzip file"):
        decode_text(b"\x1f\x8b\x08\x00", "<stdin>")


def test_the_error_survives_pickling() -> None:
    for error in (TextFileError("a.txt", 3, 4, "expected"), TextFileError("a.gz", None, None, "x")):
        copy = pickle.loads(pickle.dumps(error))
        assert str(copy) == str(error) and (copy.line, copy.column) == (error.line, error.column)
