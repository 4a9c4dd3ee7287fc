"""The featurisation cache's bound: a size cap with least-recently-used eviction, and clearing.

A 125 KB molecule CSV left a 90 MB cache file (pair features are atoms² each), and every other
set of reader options another; nothing removed them. After each write, ``bound_cache`` removes
the cache files used longest ago until the folder's files hold at most ``max_cache_bytes()``
(``FOLDEXP_CACHE_MAX_MB``, default 2048 MB; 0 keeps no cache file); a file bigger than the whole
cap is not kept (its features are in memory already; the next run featurises again). A file's
last use is its modification time: ``read_cache`` touches the file it reads (``mark_used``).
``foldexp data cache`` lists the files and ``--clear`` removes them (``clear_cache``).

Only the cache's own files are counted or removed: regular files (never a link) named
``*.npz``, or ``*.npz.*.tmp`` left by an interrupted write, directly in the folder.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path
from typing import NamedTuple

__all__ = [
    "CACHE_MAX_ENV",
    "CacheFile",
    "bound_cache",
    "cache_files",
    "clear_cache",
    "default_cache_dir",
    "DEFAULT_MAX_MB",
    "mark_used",
    "max_cache_bytes",
]

log = logging.getLogger(__name__)

CACHE_MAX_ENV = "FOLDEXP_CACHE_MAX_MB"
DEFAULT_MAX_MB = 2048
_MB = 2**20


class CacheFile(NamedTuple):
    path: Path
    size: int  # bytes
    used: float  # last use (modification time), seconds since the epoch


def default_cache_dir() -> Path:
    """The folder ``paths.cache_dir`` names by default (``conf/paths/default.yaml``; a test
    keeps the two alike): ``FOLDEXP_CACHE``, else ``$XDG_CACHE_HOME/foldexp/data``, else
    ``~/.cache/foldexp/data`` (an empty variable counts as unset)."""
    env = os.environ.get
    base = env("XDG_CACHE_HOME") or f"{env('HOME') or '.'}/.cache"
    return Path(env("FOLDEXP_CACHE") or f"{base}/foldexp/data")


def max_cache_bytes() -> int:
    """The cap in bytes: ``FOLDEXP_CACHE_MAX_MB`` (a whole number of MB, 0 or more), else 2048
    MB; a value that is not such a number is warned about and the default used."""
    text = os.environ.get(CACHE_MAX_ENV, "").strip()
    if not text:
        return DEFAULT_MAX_MB * _MB
    try:
        mb = int(text)
        if mb < 0:
            raise ValueError
    except ValueError:
        log.warning(
            "%s=%r is not a whole number of MB >= 0; the featurisation cache keeps %d MB",
            CACHE_MAX_ENV, text, DEFAULT_MAX_MB,
        )  # fmt: skip
        return DEFAULT_MAX_MB * _MB
    return mb * _MB


def _ours(entry: os.DirEntry[str]) -> bool:
    name = entry.name
    return name.endswith(".npz") or (".npz." in name and name.endswith(".tmp"))


def cache_files(folder: Path) -> list[CacheFile]:
    """The cache's files in ``folder``, used longest ago first; none if it does not exist."""
    found = []
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if not _ours(entry):
                    continue
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISREG(st.st_mode):
                    found.append(CacheFile(Path(entry.path), st.st_size, st.st_mtime))
    except FileNotFoundError:
        return []
    return sorted(found, key=lambda f: (f.used, f.path.name))


def mark_used(path: Path) -> None:
    """Records a use of the cache file ``path`` (its modification time: now)."""
    try:
        os.utime(path, follow_symlinks=False)
    except (OSError, NotImplementedError):
        pass  # a cache that cannot be touched is evicted earlier: no harm


def bound_cache(folder: Path, keep: Path | None = None) -> list[Path]:
    """Removes the files used longest ago until ``folder``'s cache files hold at most the cap;
    ``keep`` (the file just written) goes last, and only if it alone is over the cap. Returns
    the removed files."""
    cap = max_cache_bytes()
    files = cache_files(folder)
    total = sum(f.size for f in files)
    keep_size = next((f.size for f in files if f.path == keep), 0)
    order = [f for f in files if f.path != keep] + [f for f in files if f.path == keep]
    removed = []
    for f in order:
        if total <= cap:
            break
        try:
            f.path.unlink()
        except FileNotFoundError:
            pass  # another run removed it
        except OSError as exc:
            log.warning("featurisation cache %s cannot be removed (%s)", f.path, exc)
            continue
        total -= f.size
        removed.append(f.path)
    if keep in removed:
        log.warning(
            "featurisation cache: %s (%.0f MB) is more than the cache may hold (%s=%d MB): not "
            "kept", keep, keep_size / _MB, CACHE_MAX_ENV, cap // _MB,
        )  # fmt: skip
    elif removed:
        log.info(
            "featurisation cache: removed %d file(s) used longest ago, to stay under %d MB (%s)",
            len(removed), cap // _MB, CACHE_MAX_ENV,
        )  # fmt: skip
    return removed


def clear_cache(folder: Path) -> tuple[int, int]:
    """Removes every cache file in ``folder``; ``(files, bytes)`` removed."""
    count = size = 0
    for f in cache_files(folder):
        try:
            f.path.unlink()
        except FileNotFoundError:
            continue
        count, size = count + 1, size + f.size
    return count, size
