"""Reading a JSON file so that a broken one is reported by name.

``json.loads`` says only ``Expecting value: line 1 column 1 (char 0)``: not which file. Every
JSON file foldexp reads from disk -- results, vocabularies, bench files -- goes through
:func:`read_json`, whose error names the file, the line and the column. It lives in the data
layer, the lowest that reads files, so every layer above may import it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from foldexp.data.errors import FormatError

__all__ = ["parse_json", "read_json"]


def read_json(path: str | os.PathLike[str]) -> Any:
    """The value held by the JSON file ``path``.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        FormatError: (a ``ValueError``) the file is not UTF-8 text or not valid JSON; the
            message is ``path:line:column: expected ...``.
    """
    path = Path(path)
    return parse_json(path.read_bytes(), path)


def parse_json(data: bytes, path: str | os.PathLike[str]) -> Any:
    """The value the bytes ``data``, read from the file ``path``, hold as JSON: for a caller
    that has already read them (to check their checksum); errors as ``read_json``'s."""
    try:
        text = data.decode("utf-8-sig")  # a byte-order mark is harmless: skip it
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise FormatError(
            f"{path}:{line}: expected UTF-8 JSON text, got byte 0x{data[exc.start]:02x} "
            f"(byte offset {exc.start})"
        ) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise FormatError(
            f"{path}:{exc.lineno}:{exc.colno}: expected valid JSON: {exc.msg}"
        ) from None
    except RecursionError:  # ``[[[[...`` a hundred thousand deep: crafted, not written
        raise FormatError(
            f"{path}: expected JSON, found arrays or objects nested too deep"
        ) from None
