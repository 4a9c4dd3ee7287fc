"""Molecule datasets: CSV of SMILES and targets -> featurised :class:`MoleculeGraph` objects.

Any CSV with a SMILES column and one or more numeric target columns can be loaded with
:func:`load_molecule_csv`; :func:`load_esol` and :func:`load_freesolv` know the column names of
the two MoleculeNet regression sets. Empty, ``nan`` or ``NA`` targets are missing: they are stored
as 0 with ``target_mask`` False, so a masked loss can skip them (NaN would poison a sum).

Invalid SMILES (RDKit cannot parse them) raise :class:`MoleculeError` listing the first offending
rows, or with ``on_invalid="skip"`` are left out with a :class:`DataWarning` that counts and names
them -- every time the dataset is loaded, cached or not.

Featurisation is cached on disk when a ``cache_dir`` is given: one ``.npz`` per (CSV content,
featuriser version, RDKit version, options), written atomically, so a second load skips RDKit.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import os
import sys
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
from tqdm import tqdm

from foldexp.data import featurize
from foldexp.data.errors import DatasetNotFoundError, DataWarning, FormatError, MoleculeError
from foldexp.data.molecule_cache import cache_path, read_cache, write_cache
from foldexp.data.paths import resolve_data_dir

__all__ = [
    "ESOL_FILE",
    "FREESOLV_FILE",
    "MoleculeDataset",
    "MoleculeGraph",
    "load_esol",
    "load_freesolv",
    "load_molecule_csv",
]

ESOL_FILE = "molecules/delaney-processed.csv"
ESOL_TARGET = "measured log solubility in mols per litre"
FREESOLV_FILE = "molecules/freesolv.csv"
FREESOLV_TARGET = "expt"

_MISSING = {"", "nan", "na", "n/a", "none", "null"}
_SHOW_INVALID = 5  # rows named in an invalid-SMILES message

OnInvalid = Literal["raise", "skip"]


@dataclass(frozen=True, eq=False)
class MoleculeGraph:
    """One featurised molecule.

    Attributes:
        smiles: The SMILES string as written in the CSV (surrounding whitespace removed).
        atom_features: ``(n_atoms, ATOM_FEATURES)`` float32.
        pair_features: ``(n_atoms, n_atoms, PAIR_FEATURES)`` float32.
        targets: ``(T,)`` float32; 0 where missing.
        target_mask: ``(T,)`` bool; False where the target is missing.
    """

    smiles: str
    atom_features: np.ndarray
    pair_features: np.ndarray
    targets: np.ndarray
    target_mask: np.ndarray

    @property
    def n_atoms(self) -> int:
        """Number of (heavy) atoms."""
        return int(self.atom_features.shape[0])


@dataclass(frozen=True, eq=False)
class MoleculeDataset(Sequence[MoleculeGraph]):
    """Featurised molecules of one CSV file, in file order.

    Attributes:
        graphs: The molecules.
        target_names: CSV column of each target.
        source: The CSV file.
        rows: 1-based data row (line - 1) of each molecule in the CSV.
        skipped: ``(row, smiles)`` of rows left out as invalid (``on_invalid="skip"``).
    """

    graphs: list[MoleculeGraph]
    target_names: tuple[str, ...]
    source: Path
    rows: np.ndarray
    skipped: tuple[tuple[int, str], ...] = field(default=())

    def __len__(self) -> int:
        return len(self.graphs)

    def __getitem__(self, index):  # int -> MoleculeGraph; slice -> list (Sequence protocol)
        return self.graphs[index]

    def __iter__(self) -> Iterator[MoleculeGraph]:
        return iter(self.graphs)

    @property
    def smiles(self) -> list[str]:
        """SMILES of every molecule."""
        return [g.smiles for g in self.graphs]

    @property
    def targets(self) -> np.ndarray:
        """``(N, T)`` float32 targets (0 where missing)."""
        return np.stack([g.targets for g in self.graphs]) if self.graphs else np.zeros((0, 0))

    @property
    def target_mask(self) -> np.ndarray:
        """``(N, T)`` bool, False where a target is missing."""
        return np.stack([g.target_mask for g in self.graphs]) if self.graphs else np.zeros((0, 0))

    def subset(self, indices: Sequence[int] | np.ndarray) -> MoleculeDataset:
        """Return the dataset restricted to ``indices`` (e.g. one part of a split)."""
        idx = [int(i) for i in indices]
        return MoleculeDataset(
            [self.graphs[i] for i in idx], self.target_names, self.source, self.rows[idx]
        )

    def __repr__(self) -> str:
        return (
            f"MoleculeDataset({self.source.name}, {len(self)} molecules, "
            f"targets={list(self.target_names)})"
        )


# ---------------------------------------------------------------------- CSV reading


def _read_csv(
    path: Path, smiles_column: str, target_columns: Sequence[str]
) -> tuple[list[int], list[str], np.ndarray, np.ndarray]:
    """Return data rows, SMILES, targets and mask from a CSV; errors name file, row and column."""
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            if header is None:
                raise MoleculeError(f"{path}: expected a CSV header line, got an empty file")
            header = [h.strip() for h in header]
            missing = [c for c in (smiles_column, *target_columns) if c not in header]
            if missing:
                raise MoleculeError(
                    f"{path}:1: expected column(s) {missing} in the header; "
                    f"the columns are {header}"
                )
            s_col = header.index(smiles_column)
            t_cols = [header.index(c) for c in target_columns]
            rows, smiles, values, mask = [], [], [], []
            for row_number, record in enumerate(reader, start=1):
                if not record or all(not x.strip() for x in record):
                    continue  # a blank line holds no data
                line = reader.line_num
                if len(record) != len(header):
                    raise MoleculeError(
                        f"{path}:{line}: row {row_number}: expected {len(header)} fields, "
                        f"got {len(record)}"
                    )
                rows.append(row_number)
                smiles.append(record[s_col].strip())
                row_values, row_mask = [], []
                for name, col in zip(target_columns, t_cols, strict=True):
                    text = record[col].strip()
                    if text.lower() in _MISSING:
                        row_values.append(0.0)
                        row_mask.append(False)
                        continue
                    try:
                        value = float(text)
                    except ValueError:
                        raise MoleculeError(
                            f"{path}:{line}: row {row_number}, column {name!r}: "
                            f"expected a number or an empty field, got {text!r}"
                        ) from None
                    row_values.append(0.0 if math.isnan(value) else value)
                    row_mask.append(not math.isnan(value))
                values.append(row_values)
                mask.append(row_mask)
    except UnicodeDecodeError as exc:
        raise FormatError(f"{path}: expected a UTF-8 CSV file ({exc.reason})") from None
    except csv.Error as exc:
        raise FormatError(f"{path}: malformed CSV: {exc}") from None
    n_targets = len(target_columns)
    targets = np.array(values, dtype=np.float32).reshape(-1, n_targets)
    target_mask = np.array(mask, dtype=bool).reshape(-1, n_targets)
    return rows, smiles, targets, target_mask


def _describe_invalid(path: Path, invalid: list[tuple[int, str]]) -> str:
    shown = "; ".join(f"row {row} (line {row + 1}): {s!r}" for row, s in invalid[:_SHOW_INVALID])
    more = f"; and {len(invalid) - _SHOW_INVALID} more" if len(invalid) > _SHOW_INVALID else ""
    return f"{path}: {len(invalid)} invalid SMILES (RDKit could not parse them): {shown}{more}"


# ---------------------------------------------------------------------- loading


def load_molecule_csv(
    path: str | os.PathLike[str],
    *,
    smiles_column: str = "smiles",
    target_columns: str | Sequence[str],
    on_invalid: OnInvalid = "raise",
    cache_dir: str | os.PathLike[str] | None = None,
    progress: bool | None = None,
) -> MoleculeDataset:
    """Load and featurise a CSV of molecules.

    Args:
        path: The CSV file (UTF-8, header line first).
        smiles_column: Name of the SMILES column.
        target_columns: Name(s) of the numeric target column(s); empty or ``nan`` = missing.
        on_invalid: ``"raise"`` (default) a :class:`MoleculeError` naming the first invalid rows,
            or ``"skip"`` them with a :class:`DataWarning`.
        cache_dir: Directory for the featurisation cache; ``None`` disables caching.
        progress: Show a progress bar while featurising; default: when stderr is a terminal.

    Returns:
        The featurised dataset.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        MoleculeError: A column is missing, a target is not a number, or (``on_invalid="raise"``)
            a SMILES is invalid.
    """
    if on_invalid not in ("raise", "skip"):
        raise ValueError(f"on_invalid must be 'raise' or 'skip', got {on_invalid!r}")
    path = Path(path)
    targets_tuple = (target_columns,) if isinstance(target_columns, str) else tuple(target_columns)
    if not targets_tuple:
        raise ValueError("target_columns must name at least one column")
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")

    cache_file = None
    if cache_dir is not None:
        options = {
            "smiles_column": smiles_column,
            "target_columns": list(targets_tuple),
            "on_invalid": on_invalid,
        }
        cache_file = cache_path(Path(cache_dir), path, _cache_key(path, options))
        cached = read_cache(cache_file)
        if cached is not None:
            cached_graphs = [
                MoleculeGraph(s, a, p, t, m)
                for s, a, p, t, m in zip(
                    cached.smiles,
                    cached.atom_features,
                    cached.pair_features,
                    cached.targets,
                    cached.target_mask,
                    strict=True,
                )
            ]
            return _finish(path, targets_tuple, cached_graphs, cached.rows, cached.invalid)

    rows, smiles, targets, mask = _read_csv(path, smiles_column, targets_tuple)
    if progress is None:
        progress = sys.stderr.isatty()
    graphs: list[MoleculeGraph] = []
    kept_rows: list[int] = []
    kept_index: list[int] = []
    invalid: list[tuple[int, str]] = []
    items = enumerate(zip(rows, smiles, targets, mask, strict=True))
    bar = tqdm(
        items, total=len(rows), desc=f"featurising {path.name}", unit="mol", disable=not progress
    )
    for i, (row, s, t, m) in bar:
        mol = featurize.parse_smiles(s)
        if mol is None:
            invalid.append((row, s))
            continue
        atoms, pairs = featurize.featurize_mol(mol)
        graphs.append(MoleculeGraph(s, atoms, pairs, t, m))
        kept_rows.append(row)
        kept_index.append(i)
    if invalid and on_invalid == "raise":
        raise MoleculeError(
            _describe_invalid(path, invalid) + "; fix them or pass on_invalid='skip'"
        )
    kept = np.array(kept_rows, dtype=np.int64)
    if cache_file is not None:
        write_cache(
            cache_file,
            [g.smiles for g in graphs],
            [g.atom_features for g in graphs],
            [g.pair_features for g in graphs],
            targets[kept_index],
            mask[kept_index],
            kept,
            invalid,
        )
    return _finish(path, targets_tuple, graphs, kept, invalid)


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


def _named_dataset(name: str, relative: str, target: str, data_dir, **options) -> MoleculeDataset:
    path = resolve_data_dir(data_dir) / relative
    if not path.is_file():
        raise DatasetNotFoundError(
            f"{name} not found: {path} does not exist. Get it with `foldexp data fetch {name}` "
            f"(needs internet) or `foldexp data import {name} PATH` with a local CSV; the data "
            "directory is FOLDEXP_DATA or ./data unless --data-dir is given."
        )
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
