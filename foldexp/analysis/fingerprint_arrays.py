"""``foldexp fingerprint RUN INPUT --output FILE.npy`` (or ``FILE.npz``): the fingerprints as a
NumPy array beside a CSV of the rows' IDs.

The suffix chooses: ``.npy`` is one float32 array ``(rows, D)``, row ``i`` the input's row
``i``, ``NaN`` throughout for an input that could not be read; ``.npz`` holds the same array
as ``fingerprints``. The IDs stay in CSV, in a companion file ``FILE.ids.csv`` (``fp.npy`` →
``fp.ids.csv``): the input, the file's other columns and ``error``, row for row, as the CSV
output has them without ``fp_*``. Both are streamed: each chunk's rows are appended as they
come (a ``.npy``'s header, whose shape is not known until the end, is written last over a
fixed-size placeholder; a ``.npz`` copies that file into its zip member afterwards), so memory
stays bounded whatever the row count, and both files appear atomically.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, BinaryIO

import numpy as np

from foldexp.train.artifacts import atomic_write

__all__ = ["ARRAY_SUFFIXES", "NpyRows", "array_output", "ids_path", "write_arrays"]

ARRAY_SUFFIXES = (".npy", ".npz")
#: The .npy header's fixed size (magic, version, length, the dict padded with spaces): room
#: for any row count; a multiple of 64, as NumPy aligns it.
HEADER_BYTES = 128


def array_output(output: str | Path | None, fingerprint: bool) -> bool:
    """Whether ``output`` asks for NumPy (its suffix); refuses it for predictions."""
    if output is None or Path(output).suffix.lower() not in ARRAY_SUFFIXES:
        return False
    if not fingerprint:
        raise ValueError(
            f"--output {output}: .npy and .npz are for foldexp fingerprint; predictions are CSV"
        )
    return True


def ids_path(output: str | Path) -> Path:
    """The IDs' companion CSV of an array output: ``fp.npy`` → ``fp.ids.csv``."""
    output = Path(output)
    return output.with_name(f"{output.stem}.ids.csv")


class NpyRows:
    """Appends float32 rows of ``width`` values to ``file`` as a ``.npy`` array."""

    def __init__(self, file: BinaryIO, width: int) -> None:
        self.file, self.width, self.rows = file, width, 0
        file.write(self._header())  # a placeholder: the shape is known at the end

    def _header(self) -> bytes:
        spec = f"{{'descr': '<f4', 'fortran_order': False, 'shape': ({self.rows}, {self.width}), }}"
        size = HEADER_BYTES - 10  # magic (6), version (2), the header's length (2)
        return (
            b"\x93NUMPY\x01\x00"
            + size.to_bytes(2, "little")
            + spec.ljust(size - 1).encode()
            + b"\n"
        )

    def take(self, rows: list[list[Any]], start: int, width: int) -> list[list[Any]]:
        """Writes each row's ``width`` cells from ``start`` (blank: NaN) and returns the rows
        without them."""
        block = np.full((len(rows), width), np.nan, dtype="<f4")
        for k, row in enumerate(rows):
            cells = row[start : start + width]
            if all(c != "" for c in cells):
                block[k] = np.asarray(cells, dtype=np.float64)
        self.file.write(block.tobytes())
        self.rows += len(rows)
        return [row[:start] + row[start + width :] for row in rows]

    def finish(self) -> None:
        """Writes the header with the final row count."""
        self.file.flush()
        self.file.seek(0)
        self.file.write(self._header())
        self.file.seek(0, os.SEEK_END)


def write_arrays(output: str | Path, width: int, write: Callable[[IO[str], NpyRows], None]) -> None:
    """``write(csv_stream, rows)`` streams the IDs into ``FILE.ids.csv`` and the values into
    ``rows``; the array is then ``output`` (``.npy``, or ``.npz`` with ``fingerprints``)."""
    zipped = Path(output).suffix.lower() == ".npz"

    def to_ids(tmp_ids: str) -> None:
        def to_array(tmp: str) -> None:
            spool = tempfile.mkstemp(suffix=".npy", dir=Path(tmp).parent)[1] if zipped else tmp
            try:
                with (
                    open(tmp_ids, "w", encoding="utf-8", newline="") as out,
                    open(spool, "wb") as f,
                ):
                    rows = NpyRows(f, width)
                    write(out, rows)
                    rows.finish()
                if zipped:
                    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
                        with z.open("fingerprints.npy", "w", force_zip64=True) as member:
                            with open(spool, "rb") as f:
                                shutil.copyfileobj(f, member, 1 << 20)
            finally:
                if zipped:
                    os.unlink(spool)

        atomic_write(output, to_array)

    atomic_write(ids_path(output), to_ids)
