"""On-disk cache of featurised molecule datasets (one uncompressed ``.npz`` per dataset).

Per-molecule arrays are stored concatenated with an ``n_atoms`` index, so loading is a handful of
large reads rather than thousands of small ones. Pair features are all 0/1 and are stored as
``uint8`` (a quarter of the float32 size). Files are written to a temporary name in the cache
directory and moved into place with :func:`os.replace`, so concurrent or interrupted runs never
leave a half-written cache behind; others may read them (as the umask allows), never write them.
No pickles: ``np.load(allow_pickle=False)``. The folder's files are bounded by a size cap,
least recently used first (``foldexp.data.cache_bound``: ``FOLDEXP_CACHE_MAX_MB``).

The metadata records a sha256 over every array (name, dtype, shape and bytes) and the full key of
the features (the CSV's digest with the reader's options): a file made from another CSV, or with
other targets, is never read back for this one. A cache file that is empty, truncated, changed,
mis-shaped, of another key or of another format is never an error: ``read_cache`` logs why and
returns ``None``, and the caller featurises again and overwrites it.

Trust, as for the kernel cache (``foldexp.kernels.library_files``; ``data`` imports nothing
else of foldexp): the cache holds targets that training reads as the truth, so a folder another
user could write to is not used at all (a warning says why): the folder must be this user's,
writable by nobody else, and so must every folder above it (or have the sticky bit, as /tmp).
A cache file is read only if it is a regular file (not a link) of this user's that nobody else
may write. Files are written without group or other write permission; missing folders are made
private (0700).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
import tempfile
import zipfile
from pathlib import Path
from typing import NamedTuple

import numpy as np

from foldexp.data.cache_bound import bound_cache, mark_used

__all__ = ["CachedFeatures", "cache_path", "folder_fault", "read_cache", "write_cache"]

log = logging.getLogger(__name__)

_CACHE_FORMAT = 4  # 2: with a checksum; 3: with the features' full key; 4: molecule features
_ARRAYS = (
    "smiles",
    "n_atoms",
    "atom_features",
    "pair_features",
    "targets",
    "target_mask",
    "rows",
    "invalid_rows",
    "invalid_smiles",
    "features",  # (N, F) float32 molecule-level features (dataset.features); F = 0 without
)


class _Damaged(ValueError):
    """Why a cache file cannot be used (logged, then the cache is rebuilt)."""


class _OtherFormat(_Damaged):
    """A cache written by another version of this module: rebuilt without alarm."""


def _digest(arrays: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for name in _ARRAYS:
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}:{a.dtype.str}:{a.shape};".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _uid() -> int | None:
    return os.getuid() if hasattr(os, "getuid") else None


def folder_fault(folder: Path) -> str | None:
    """Why ``folder`` is not a private cache folder of this user, else ``None``: it (or a folder
    above it, as named or resolved) is owned by another user (root excepted above it), or
    writable by others (above it: without the sticky bit) — the kernel cache's rules."""
    uid = _uid()
    try:
        st = os.stat(folder)
        if not stat.S_ISDIR(st.st_mode):
            return f"{folder} is not a folder"
        if uid is not None and (st.st_uid != uid or st.st_mode & 0o022):
            return f"{folder} has owner {st.st_uid} and mode {st.st_mode & 0o777:o}"
        for parent in dict.fromkeys([*folder.absolute().parents, *folder.resolve().parents]):
            st = os.stat(parent)
            if uid is not None and st.st_uid not in (uid, 0):
                return f"{parent} is owned by user {st.st_uid}"
            if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
                return f"{parent} is writable by others (mode {st.st_mode & 0o7777:o})"
    except OSError as exc:
        return f"{exc.strerror or exc}"
    return None


def _private_folder(folder: Path) -> bool:
    """Makes ``folder`` (missing folders private, 0700); whether it may hold the cache (a
    warning says why not)."""
    try:
        for missing in [p for p in (*reversed(folder.parents), folder) if not p.exists()]:
            missing.mkdir(mode=0o700, exist_ok=True)
    except OSError as exc:
        log.warning("featurisation cache %s cannot be made (%s): not used", folder, exc)
        return False
    fault = folder_fault(folder)
    if fault is not None:
        log.warning(
            "featurisation cache %s is not a private folder of this user (%s): not used; set "
            "paths.cache_dir (FOLDEXP_CACHE) to a folder only you can change",
            folder,
            fault,
        )
    return fault is None


def _open_own(path: Path) -> int:
    """``path`` opened without following a link, and checked: a regular file of this user's
    that nobody else may write (else ``_Damaged`` saying why)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    st, uid = os.fstat(fd), _uid()
    fault = (
        "not a regular file" if not stat.S_ISREG(st.st_mode)
        else f"owned by user {st.st_uid}" if uid is not None and st.st_uid != uid
        else f"writable by others (mode {st.st_mode & 0o777:o})" if st.st_mode & 0o022
        else None
    )  # fmt: skip
    if fault is not None:
        os.close(fd)
        raise _Damaged(f"not trusted: {fault}")
    os.set_blocking(fd, True)
    return fd


def _file_mode() -> int:
    """``0o644`` less the umask (read without changing it where /proc allows): never writable
    by others, who could change the targets."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            umask = next(int(ln.split()[1], 8) for ln in f if ln.startswith("Umask:"))
    except (OSError, ValueError, IndexError, StopIteration):
        umask = os.umask(0o022)
        os.umask(umask)
    return 0o644 & ~umask


class CachedFeatures(NamedTuple):
    """Contents of one cache file, per molecule in file order."""

    smiles: list[str]
    atom_features: list[np.ndarray]
    pair_features: list[np.ndarray]
    targets: np.ndarray
    target_mask: np.ndarray
    rows: np.ndarray
    invalid: list[tuple[int, str]]
    features: np.ndarray | None = None  # (N, F) float32, None when F = 0


def cache_path(cache_dir: Path, csv_path: Path, key: str) -> Path:
    """Return the cache file for ``csv_path`` under ``cache_dir`` for a given content key."""
    return cache_dir / f"{csv_path.stem}-{key[:20]}.npz"


def write_cache(
    path: Path,
    smiles: list[str],
    atom_features: list[np.ndarray],
    pair_features: list[np.ndarray],
    targets: np.ndarray,
    target_mask: np.ndarray,
    rows: np.ndarray,
    invalid: list[tuple[int, str]],
    key: str = "",
    features: np.ndarray | None = None,
) -> None:
    """Write featurised molecules atomically to ``path`` (``key``: their full cache key, which
    ``read_cache`` must be given back; ``features``: ``(N, F)`` molecule-level features, if
    any); nothing in a folder that is not private (logged)."""
    if not _private_folder(path.parent):
        return
    n_atoms = np.array([a.shape[0] for a in atom_features], dtype=np.int64)
    a_dim = atom_features[0].shape[1] if atom_features else 0
    p_dim = pair_features[0].shape[2] if pair_features else 0
    atoms = np.concatenate(atom_features) if atom_features else np.zeros((0, a_dim), np.float32)
    pairs = (
        np.concatenate([p.reshape(-1, p_dim) for p in pair_features]).astype(np.uint8)
        if pair_features
        else np.zeros((0, p_dim), np.uint8)
    )
    arrays = {
        "smiles": np.array(smiles, dtype=str),
        "n_atoms": n_atoms,
        "atom_features": atoms,
        "pair_features": pairs,
        "targets": targets,
        "target_mask": target_mask,
        "rows": rows,
        "invalid_rows": np.array([r for r, _ in invalid], dtype=np.int64),
        "invalid_smiles": np.array([s for _, s in invalid], dtype=str),
        "features": (
            np.zeros((len(smiles), 0), np.float32)
            if features is None
            else np.asarray(features, np.float32).reshape(len(smiles), -1)
        ),
    }
    meta = {
        "format": _CACHE_FORMAT,
        "atom_dim": int(a_dim),
        "pair_dim": int(p_dim),
        "sha256": _digest(arrays),
        "key": key,
    }
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, meta=np.array(json.dumps(meta)), **arrays)
        os.chmod(tmp, _file_mode())  # mkstemp creates 0600: others may read, never write
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    bound_cache(path.parent, keep=path)  # the cap, least recently used first (cache_bound.py)


def read_cache(path: Path, key: str = "") -> CachedFeatures | None:
    """Read a cache file; ``None`` if it is absent, damaged, made for another key (``key``: the
    full cache key of the features wanted), from another format version, or not trusted (its
    folder or the file could be written by someone else).

    A damaged cache is never an error: the reason is logged, and the caller featurises again and
    overwrites it.
    """
    if not path.is_file() or not _private_folder(path.parent):
        return None
    try:
        features = _decode(path, key)
        mark_used(path)  # its last use: the cap removes the files used longest ago first
        return features
    except _OtherFormat as exc:
        log.info("featurisation cache %s: %s; featurising again", path, exc)
    except _Damaged as exc:
        log.warning("featurisation cache %s: %s; featurising again", path, exc)
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        log.warning("featurisation cache %s is unreadable (%s); featurising again", path, exc)
    return None


def _decode(path: Path, key: str) -> CachedFeatures:
    """The cache's contents; raises ``_Damaged`` (or a read error) when they cannot be used."""
    with os.fdopen(_open_own(path), "rb") as f, np.load(f, allow_pickle=False) as z:
        meta = json.loads(str(z["meta"]))
        if not isinstance(meta, dict) or meta.get("format") != _CACHE_FORMAT:
            version = meta.get("format") if isinstance(meta, dict) else None
            raise _OtherFormat(f"format {version!r}, not {_CACHE_FORMAT} (another version's)")
        if meta.get("key") != key:
            raise _Damaged("made from another file or other options (its key differs)")
        arrays = {name: z[name] for name in _ARRAYS}
    if _digest(arrays) != meta.get("sha256"):
        raise _Damaged("contents do not match their checksum")
    n_atoms, atoms, pairs = arrays["n_atoms"], arrays["atom_features"], arrays["pair_features"]
    p_dim, n = int(meta["pair_dim"]), len(n_atoms)
    if (
        atoms.shape[:1] != (int(n_atoms.sum()),)
        or pairs.shape != (int((n_atoms**2).sum()), p_dim)
        or arrays["features"].ndim != 2
        or any(
            len(arrays[k]) != n for k in ("smiles", "targets", "target_mask", "rows", "features")
        )
    ):
        raise _Damaged("its arrays do not fit together (mis-shaped)")
    pairs = pairs.astype(np.float32)
    atom_bounds = np.concatenate([[0], np.cumsum(n_atoms)])
    pair_bounds = np.concatenate([[0], np.cumsum(n_atoms**2)])
    atom_list, pair_list = [], []
    for i, k in enumerate(n_atoms.tolist()):
        atom_list.append(atoms[atom_bounds[i] : atom_bounds[i + 1]])
        pair_list.append(pairs[pair_bounds[i] : pair_bounds[i + 1]].reshape(k, k, p_dim))
    invalid = list(
        zip(arrays["invalid_rows"].tolist(), arrays["invalid_smiles"].tolist(), strict=True)
    )
    return CachedFeatures(
        arrays["smiles"].tolist(),
        atom_list,
        pair_list,
        arrays["targets"],
        arrays["target_mask"],
        arrays["rows"],
        invalid,
        arrays["features"] if arrays["features"].shape[1:] != (0,) else None,
    )
