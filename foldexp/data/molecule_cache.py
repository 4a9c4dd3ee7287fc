"""On-disk cache of featurised molecule datasets (one uncompressed ``.npz`` per dataset).

Per-molecule arrays are stored concatenated with an ``n_atoms`` index, so loading is a handful of
large reads rather than thousands of small ones. Pair features are all 0/1 and are stored as
``uint8`` (a quarter of the float32 size). Files are written to a temporary name in the cache
directory and moved into place with :func:`os.replace`, so concurrent or interrupted runs never
leave a half-written cache behind. No pickles: ``np.load(allow_pickle=False)``.
"""

from __future__ import annotations

import json
import os
import tempfile
import zipfile
from pathlib import Path
from typing import NamedTuple

import numpy as np

__all__ = ["CachedFeatures", "cache_path", "read_cache", "write_cache"]

_CACHE_FORMAT = 1


class CachedFeatures(NamedTuple):
    """Contents of one cache file, per molecule in file order."""

    smiles: list[str]
    atom_features: list[np.ndarray]
    pair_features: list[np.ndarray]
    targets: np.ndarray
    target_mask: np.ndarray
    rows: np.ndarray
    invalid: list[tuple[int, str]]


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
) -> None:
    """Write featurised molecules atomically to ``path``."""
    n_atoms = np.array([a.shape[0] for a in atom_features], dtype=np.int64)
    a_dim = atom_features[0].shape[1] if atom_features else 0
    p_dim = pair_features[0].shape[2] if pair_features else 0
    atoms = np.concatenate(atom_features) if atom_features else np.zeros((0, a_dim), np.float32)
    pairs = (
        np.concatenate([p.reshape(-1, p_dim) for p in pair_features]).astype(np.uint8)
        if pair_features
        else np.zeros((0, p_dim), np.uint8)
    )
    meta = {"format": _CACHE_FORMAT, "atom_dim": int(a_dim), "pair_dim": int(p_dim)}
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(
                f,
                meta=np.array(json.dumps(meta)),
                smiles=np.array(smiles, dtype=str),
                n_atoms=n_atoms,
                atom_features=atoms,
                pair_features=pairs,
                targets=targets,
                target_mask=target_mask,
                rows=rows,
                invalid_rows=np.array([r for r, _ in invalid], dtype=np.int64),
                invalid_smiles=np.array([s for _, s in invalid], dtype=str),
            )
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; a cache/vocab is meant to be shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_cache(path: Path) -> CachedFeatures | None:
    """Read a cache file; ``None`` if it is absent, unreadable or from another format version.

    A damaged cache is never an error: the caller featurises again and overwrites it.
    """
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            if meta.get("format") != _CACHE_FORMAT:
                return None
            n_atoms = z["n_atoms"]
            atoms = z["atom_features"]
            pairs = z["pair_features"].astype(np.float32)
            smiles = z["smiles"].tolist()
            targets, target_mask, rows = z["targets"], z["target_mask"], z["rows"]
            invalid = list(
                zip(z["invalid_rows"].tolist(), z["invalid_smiles"].tolist(), strict=True)
            )
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, json.JSONDecodeError):
        return None
    p_dim = int(meta["pair_dim"])
    atom_bounds = np.concatenate([[0], np.cumsum(n_atoms)])
    pair_bounds = np.concatenate([[0], np.cumsum(n_atoms**2)])
    atom_list, pair_list = [], []
    for i, n in enumerate(n_atoms.tolist()):
        atom_list.append(atoms[atom_bounds[i] : atom_bounds[i + 1]])
        pair_list.append(pairs[pair_bounds[i] : pair_bounds[i + 1]].reshape(n, n, p_dim))
    return CachedFeatures(smiles, atom_list, pair_list, targets, target_mask, rows, invalid)
