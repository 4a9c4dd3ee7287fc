"""A write the disk refuses, as one line: the file, the space free there and the space it needs.

``artifacts.atomic_write`` turns an ``OSError`` of a full disk (``ENOSPC``), a quota
(``EDQUOT``), a file too large (``EFBIG``) or a failing disk (``EIO``) into ``WriteFailedError``,
which ``foldexp train`` and the other commands print as their one-line error with status 2
(``train/app.py``'s ``report_errors`` takes every ``OSError`` as a user's). Its message names
the file, since the ``OSError`` of a failed ``write()`` names none, and says what is known of the
space: free on that file system, the previous version's size, what had been written.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

__all__ = ["WriteFailedError", "write_failed"]


class WriteFailedError(OSError):
    """A file the disk refused to hold (full, over quota, an I/O error); its message is one
    line naming the file, the space there and the space it needs."""

    def __str__(self) -> str:
        return str(self.args[0])


_DISK_ERRORS = {errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG}


def write_failed(path: Path, tmp: str, exc: OSError) -> WriteFailedError | None:
    """``exc`` as one line naming ``path`` and the space, when the disk refused the write."""
    if isinstance(exc, WriteFailedError):
        return exc  # the sidecar's own, already named
    if exc.errno not in _DISK_ERRORS:
        return None
    sizes = []
    with contextlib.suppress(OSError):
        st = os.statvfs(path.parent)
        sizes.append(f"{_size(st.f_bavail * st.f_frsize)} free there")
    with contextlib.suppress(OSError):
        sizes.append(f"it needs about {_size(path.stat().st_size)}, its previous version's size")
    with contextlib.suppress(OSError):
        sizes.append(f"{_size(os.path.getsize(tmp))} had been written")
    kept = "is as it was before" if path.exists() else "was not written"
    failed = WriteFailedError(
        f"cannot write {path}: {exc.strerror or exc} ({'; '.join(sizes) or 'no size known'}); "
        f"{path.name} {kept}: free space there and run again (a training run resumes from its "
        "last checkpoint with trainer.resume=true)"
    )
    failed.errno, failed.filename = exc.errno, str(path)
    return failed


def _size(n: int) -> str:
    for unit, scale in (("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"
