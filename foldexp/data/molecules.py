"""Loading molecule datasets: CSV of SMILES and targets -> featurised :class:`MoleculeGraph`
objects (``molecule_graphs``) in a :class:`MoleculeDataset`.

Any CSV with a SMILES column and one or more numeric target columns can be loaded with
:func:`load_molecule_csv`; :func:`load_esol` and :func:`load_freesolv` know the column names of
the two MoleculeNet regression sets. Empty, ``nan`` or ``NA`` targets are missing: they are stored
as 0 with ``target_mask`` False, so a masked loss can skip them (NaN would poison a sum).

The file may be gzipped (recognised by its magic bytes, not its name) and separated by commas,
tabs or semicolons (the header line decides). What cannot be trained on is refused at load,
naming the file and the line, row or column (``molecule_csv.py`` reads the file).

Invalid SMILES (RDKit cannot parse them) raise :class:`MoleculeError` listing the first offending
rows, or with ``on_invalid="skip"`` are left out with a :class:`DataWarning` that counts and names
them -- every time the dataset is loaded, cached or not.

Featurisation is cached on disk when a ``cache_dir`` is given: one ``.npz`` per (CSV content,
featuriser version, RDKit version, options), written atomically, so a second load skips RDKit.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
from tqdm import tqdm

from foldexp.data import featurize
from foldexp.data.errors import DatasetNotFoundError, DataWarning, MoleculeError
from foldexp.data.mol_features import FEATURES_VERSION, molecule_features, read_feature_columns
from foldexp.data.molecule_cache import cache_path, read_cache, write_cache
from foldexp.data.molecule_csv import (
    MAX_ATOMS,
    MAX_SMILES_CHARS,
    field_limit,
    read_molecule_rows,
    record_lines,
)
from foldexp.data.molecule_graphs import MoleculeDataset, MoleculeGraph
from foldexp.data.paths import resolve_data_dir

__all__ = [
    "ESOL_FILE",
    "ESOL_TARGET",
    "FETCHABLE",
    "FREESOLV_FILE",
    "FREESOLV_TARGET",
    "check_molecule_csv",
    "load_esol",
    "load_freesolv",
    "load_molecule_csv",
    "not_found",
]

ESOL_FILE = "molecules/delaney-processed.csv"
ESOL_TARGET = "measured log solubility in mols per litre"
FREESOLV_FILE = "molecules/freesolv.csv"
FREESOLV_TARGET = "expt"

# Part of the cache key: a cache written before the reader refused a file is not trusted.
_READER_VERSION = 3  # 3: size limits (a row past one is stored as "<why>")
#: File name → the dataset ``foldexp data fetch`` gets it as (for "not found" messages).
FETCHABLE = {"delaney-processed.csv": "esol", "freesolv.csv": "freesolv"}
_SHOW_INVALID = 5  # rows named in an invalid-SMILES message

OnInvalid = Literal["raise", "skip"]


def _describe_invalid(path: Path, invalid: list[tuple[int, str]]) -> str:
    """``invalid``: ``(row, SMILES)``, or ``(row, "<why>")`` for a row past a size limit."""
    named = invalid[:_SHOW_INVALID]
    lines = record_lines(path, (row for row, _ in named))
    shown = "; ".join(
        f"row {row} (line {lines[row]}): "
        + (s[1:-1] if s.startswith("<") else featurize.shown_smiles(s))
        for row, s in named
    )
    more = f"; and {len(invalid) - _SHOW_INVALID} more" if len(invalid) > _SHOW_INVALID else ""
    why = "RDKit could not parse them, they hold spaces, or they pass a size limit"
    return f"{path}: {len(invalid)} invalid SMILES ({why}): {shown}{more}"


# ---------------------------------------------------------------------- loading


def check_molecule_csv(
    path: str | os.PathLike[str], *, smiles_column: str, target_columns: Sequence[str]
) -> int:
    """Reads a molecule CSV as :func:`load_molecule_csv` does, without featurising, and returns
    its number of data rows; raises the same errors (``foldexp data import`` checks a file so;
    SMILES are not parsed)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    rows, *_ = read_molecule_rows(path, smiles_column, tuple(target_columns))
    return len(rows)


def load_molecule_csv(
    path: str | os.PathLike[str],
    *,
    smiles_column: str = "smiles",
    target_columns: str | Sequence[str],
    on_invalid: OnInvalid = "raise",
    cache_dir: str | os.PathLike[str] | None = None,
    progress: bool | None = None,
    max_atoms: int = MAX_ATOMS,
    max_smiles_chars: int = MAX_SMILES_CHARS,
    features: Sequence[str] = (),
    feature_columns: Sequence[str] = (),
) -> MoleculeDataset:
    """Load and featurise a CSV of molecules.

    Args:
        path: The CSV or CSV.gz file (UTF-8, header line first; comma, tab or semicolon).
        smiles_column: Name of the SMILES column.
        target_columns: Name(s) of the numeric target column(s); empty or ``nan`` = missing.
        on_invalid: ``"raise"`` (default) a :class:`MoleculeError` naming the first invalid rows,
            or ``"skip"`` them with a :class:`DataWarning`.
        cache_dir: Directory for the featurisation cache; ``None`` disables caching.
        progress: Show a progress bar while featurising; default: when stderr is a terminal.
        max_atoms: A molecule of more atoms is an invalid row (``on_invalid``).
        max_smiles_chars: So is a SMILES (or any field of its record) of more characters.
        features, feature_columns: each graph's raw molecule-level features (``mol_features``).

    Returns:
        The featurised dataset.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        FormatError: The file is not UTF-8 (naming the line) or a damaged gzip file.
        MoleculeError: The file has no data rows, a column is missing or holds no target at all,
            a target is not a finite float32 number, or (``on_invalid="raise"``) a SMILES is
            invalid.
    """
    if on_invalid not in ("raise", "skip"):
        raise ValueError(f"on_invalid must be 'raise' or 'skip', got {on_invalid!r}")
    path = Path(path)
    targets_tuple = (target_columns,) if isinstance(target_columns, str) else tuple(target_columns)
    if not targets_tuple:
        raise ValueError("target_columns must name at least one column")
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")

    options = {
        "reader": _READER_VERSION,
        "smiles_column": smiles_column,
        "target_columns": list(targets_tuple),
        "on_invalid": on_invalid,
        "max_atoms": max_atoms,
        "max_smiles_chars": max_smiles_chars,
    }
    if features or feature_columns:  # part of the key: other features never reuse a cache
        options["features"] = [list(features), list(feature_columns), FEATURES_VERSION]
    key = "" if cache_dir is None else _cache_key(path, options)  # the file's digest and options
    cache_file = None if cache_dir is None else cache_path(Path(cache_dir), path, key)
    if cache_file is not None and (cached := _read_cached(cache_file, key)) is not None:
        return _finish(path, targets_tuple, *cached)
    rows, smiles, targets, mask, too_long = read_molecule_rows(
        path, smiles_column, targets_tuple, max_smiles_chars
    )
    show = sys.stderr.isatty() if progress is None else progress
    limits = (max_atoms, max_smiles_chars)
    graphs, kept_rows, kept_index, invalid = _featurize_rows(
        path, rows, (smiles, targets, mask), too_long, limits, show, tuple(features)
    )
    graphs = _with_columns(path, graphs, kept_rows, tuple(feature_columns))
    if invalid and on_invalid == "raise":
        raise MoleculeError(
            _describe_invalid(path, invalid)
            + f"; fix them, or drop these {len(invalid)} of the {len(rows)} rows with "
            "dataset.on_invalid=skip (on_invalid='skip' in Python)"
        )
    kept = np.array(kept_rows, dtype=np.int64)
    if cache_file is not None:
        labels = (targets[kept_index], mask[kept_index])
        _write_cached(cache_file, key, graphs, labels, kept, invalid)
    return _finish(path, targets_tuple, graphs, kept, invalid)


def _write_cached(
    cache_file: Path,
    key: str,
    graphs: list[MoleculeGraph],
    labels: tuple[np.ndarray, np.ndarray],
    rows: np.ndarray,
    invalid: list[tuple[int, str]],
) -> None:
    """The featurised molecules into ``cache_file`` (``labels``: their targets and mask), for
    ``_read_cached`` to give back on the next load."""
    targets, mask = labels
    write_cache(
        cache_file,
        [g.smiles for g in graphs],
        [g.atom_features for g in graphs],
        [g.pair_features for g in graphs],
        targets,
        mask,
        rows,
        invalid,
        key=key,
        features=np.stack([g.features for g in graphs])
        if graphs[:1] and graphs[0].features is not None
        else None,
    )


def _with_columns(
    path: Path, graphs: list[MoleculeGraph], rows: list[int], columns: tuple[str, ...]
) -> list[MoleculeGraph]:
    """``graphs`` (of ``rows``) with the file's ``columns`` after their feature sets' values
    (``dataset.feature_columns``; a cell that is not a number is an error naming its row)."""
    if not columns:
        return graphs
    own = read_feature_columns(path, columns, rows)
    out = []
    for graph, row in zip(graphs, rows, strict=True):
        sets = graph.features if graph.features is not None else np.zeros(0, np.float32)
        out.append(dataclasses.replace(graph, features=np.concatenate([sets, own[row]])))
    return out


def _read_cached(
    cache_file: Path, key: str
) -> tuple[list[MoleculeGraph], np.ndarray, list[tuple[int, str]]] | None:
    """The graphs, row numbers and invalid rows a cache file holds for ``key``, or ``None`` if
    it is absent, of another key or unusable (``molecule_cache.read_cache``)."""
    cached = read_cache(cache_file, key)
    if cached is None:
        return None
    features = cached.features if cached.features is not None else [None] * len(cached.smiles)
    graphs = [
        MoleculeGraph(s, a, p, t, m, f)
        for s, a, p, t, m, f in zip(
            cached.smiles,
            cached.atom_features,
            cached.pair_features,
            cached.targets,
            cached.target_mask,
            features,
            strict=True,
        )
    ]
    return graphs, cached.rows, cached.invalid


def _featurize_rows(
    path: Path,
    rows: list[int],
    columns: tuple[list[str], np.ndarray, np.ndarray],
    too_long: set[int],
    limits: tuple[int, int],
    progress: bool,
    features: tuple[str, ...] = (),
) -> tuple[list[MoleculeGraph], list[int], list[int], list[tuple[int, str]]]:
    """RDKit over every row (``columns``: SMILES, targets, mask): the graphs, their row numbers
    and positions, and the invalid rows: ``(row, smiles)`` where RDKit could not read it, or
    ``(row, "<why>")`` (no SMILES starts with ``<``) for one past ``limits`` (``max_atoms``,
    ``max_smiles_chars``) or a record ``too_long`` for the CSV reader; ``features``: the
    feature sets each graph carries (``mol_features``)."""
    smiles, targets, mask = columns
    max_atoms, max_chars = limits
    graphs: list[MoleculeGraph] = []
    kept_rows: list[int] = []
    kept_index: list[int] = []
    invalid: list[tuple[int, str]] = []
    items = enumerate(zip(rows, smiles, targets, mask, strict=True))
    bar = tqdm(
        items, total=len(rows), desc=f"featurising {path.name}", unit="mol", disable=not progress
    )
    for i, (row, s, t, m) in bar:
        if row in too_long:
            invalid.append(
                (
                    row,
                    f"<a field longer than the CSV reader's limit of {field_limit(max_chars):,} "
                    "characters (dataset.max_smiles_chars raises it)>",
                )
            )
            continue
        mol, why = featurize.read_smiles(s, max_atoms, max_chars)
        if mol is None:
            parsed = why.startswith(("invalid", "empty"))  # RDKit's failure: keep the SMILES
            invalid.append((row, s if parsed else f"<{why}>"))
            continue
        atoms, pairs = featurize.featurize_mol(mol)
        extra = molecule_features(mol, features) if features else None
        graphs.append(MoleculeGraph(s, atoms, pairs, t, m, extra))
        kept_rows.append(row)
        kept_index.append(i)
    return graphs, kept_rows, kept_index, invalid


def _finish(
    path: Path,
    target_names: tuple[str, ...],
    graphs: list[MoleculeGraph],
    rows: np.ndarray,
    invalid: list[tuple[int, str]],
) -> MoleculeDataset:
    if invalid:
        # Only reachable with on_invalid="skip"; warned on every load, cached or not.
        warnings.warn(
            _describe_invalid(path, invalid) + "; these rows were skipped",
            DataWarning,
            stacklevel=3,
        )
    return MoleculeDataset(graphs, target_names, path, rows, tuple(invalid))


def _cache_key(path: Path, options: dict) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    from rdkit import __version__ as rdkit_version

    meta = {
        "featurizer": featurize.FEATURIZER_VERSION,
        "rdkit": rdkit_version,
        "options": options,
    }
    digest.update(json.dumps(meta, sort_keys=True).encode())
    return digest.hexdigest()


def not_found(name: str, path: Path) -> DatasetNotFoundError:
    """The error for a missing file of a dataset ``foldexp data fetch`` knows."""
    return DatasetNotFoundError(
        f"{name} not found: {path} does not exist. Get it with `foldexp data fetch {name}` "
        f"(needs internet) or `foldexp data import {name} PATH` with a local CSV; the data "
        "directory is FOLDEXP_DATA or ./data, or the one given: foldexp train paths.data_dir=DIR, "
        "foldexp data --data-dir DIR."
    )


def _named_dataset(name: str, relative: str, target: str, data_dir, **options) -> MoleculeDataset:
    path = resolve_data_dir(data_dir) / relative
    if not path.is_file():
        raise not_found(name, path)
    return load_molecule_csv(path, smiles_column="smiles", target_columns=[target], **options)


def load_esol(data_dir: str | os.PathLike[str] | None = None, **options) -> MoleculeDataset:
    """Load ESOL (Delaney 2004; 1128 molecules, target: log solubility in mol/L).

    Args:
        data_dir: Data root holding ``molecules/delaney-processed.csv``.
        **options: ``on_invalid``, ``cache_dir``, ``progress`` as in :func:`load_molecule_csv`.
    """
    return _named_dataset("esol", ESOL_FILE, ESOL_TARGET, data_dir, **options)


def load_freesolv(data_dir: str | os.PathLike[str] | None = None, **options) -> MoleculeDataset:
    """Load FreeSolv (642 molecules, target ``expt``: hydration free energy in kcal/mol).

    Args:
        data_dir: Data root holding ``molecules/freesolv.csv``.
        **options: ``on_invalid``, ``cache_dir``, ``progress`` as in :func:`load_molecule_csv`.
    """
    return _named_dataset("freesolv", FREESOLV_FILE, FREESOLV_TARGET, data_dir, **options)
