"""Several molecules a row (``dataset.smiles_column=[solute, solvent]``): :class:`MoleculeSet`
and :func:`load_molecule_sets`.

Each SMILES column is loaded as a molecule CSV of its own (``molecules.load_molecule_csv``:
the same checks, and its featurisation cached under a key holding that column's name, so a
file's columns are cached one by one and a second run reads them back). A row is kept when
every column's molecule is; a row whose SMILES in some column cannot be read is refused (or,
with ``on_invalid="skip"``, left out with a warning), the message naming its row, line and
column. The row's molecules and targets make one :class:`MoleculeSet`, whose ``smiles`` is the
first column's: the split that reads structure (scaffold, k-means, Kennard–Stone) reads that.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from foldexp.data import featurize
from foldexp.data.errors import DataWarning, MoleculeError
from foldexp.data.molecule_csv import record_lines
from foldexp.data.molecule_graphs import MoleculeDataset, MoleculeGraph
from foldexp.data.molecules import load_molecule_csv

__all__ = ["MoleculeSet", "load_molecule_sets"]

_SHOW_INVALID = 5


@dataclass(frozen=True, eq=False)
class MoleculeSet:
    """One row's molecules, one a SMILES column, and the row's targets.

    Attributes:
        molecules: Each column's featurised molecule, in the columns' order.
        targets: ``(T,)`` float32; 0 where missing.
        target_mask: ``(T,)`` bool; False where the target is missing.
    """

    molecules: tuple[MoleculeGraph, ...]
    targets: np.ndarray
    target_mask: np.ndarray
    features: np.ndarray | None = None  # molecule-level features are not read for sets

    @property
    def smiles(self) -> str:
        """The first column's SMILES (what a structural split reads)."""
        return self.molecules[0].smiles

    @property
    def n_atoms(self) -> int:
        """Atoms of all the row's molecules."""
        return sum(m.n_atoms for m in self.molecules)


def _describe(path: Path, invalid: list[tuple[int, str, str]]) -> str:
    """``invalid``: ``(row, column, SMILES or "<why>")``; the first few named with their line."""
    named = invalid[:_SHOW_INVALID]
    lines = record_lines(path, (row for row, _, _ in named))
    shown = "; ".join(
        f"row {row} (line {lines[row]}), column {column!r}: "
        + (s[1:-1] if s.startswith("<") else featurize.shown_smiles(s))
        for row, column, s in named
    )
    more = f"; and {len(invalid) - _SHOW_INVALID} more" if len(invalid) > _SHOW_INVALID else ""
    why = "RDKit could not parse them, they hold spaces, or they pass a size limit"
    return f"{path}: {len(invalid)} invalid SMILES ({why}): {shown}{more}"


def load_molecule_sets(
    path: str | os.PathLike[str],
    *,
    smiles_column: Sequence[str],
    target_columns: str | Sequence[str],
    on_invalid: str = "raise",
    **options: Any,
) -> MoleculeDataset:
    """A CSV with several SMILES columns as a dataset of :class:`MoleculeSet` (one a row).

    Args:
        path: The CSV, as for ``load_molecule_csv``.
        smiles_column: Two or more SMILES columns, each molecule in its own.
        target_columns, on_invalid: As for ``load_molecule_csv``.
        **options: ``cache_dir``, ``progress``, ``max_atoms``, ``max_smiles_chars``.

    Raises:
        MoleculeError: As ``load_molecule_csv``; an invalid SMILES names its column.
    """
    if on_invalid not in ("raise", "skip"):
        raise ValueError(f"on_invalid must be 'raise' or 'skip', got {on_invalid!r}")
    path = Path(path)
    loaded = []
    with warnings.catch_warnings():  # each column's skipped rows are told once, below
        warnings.simplefilter("ignore", DataWarning)
        for column in smiles_column:
            loaded.append(
                load_molecule_csv(
                    path,
                    smiles_column=column,
                    target_columns=target_columns,
                    on_invalid="skip",
                    **options,
                )
            )
    invalid = sorted(
        (int(row), column, s)
        for column, data in zip(smiles_column, loaded, strict=True)
        for row, s in data.skipped
    )
    if invalid and on_invalid == "raise":
        bad = len({row for row, _, _ in invalid})
        raise MoleculeError(
            _describe(path, invalid) + f"; fix them, or drop these {bad} rows with "
            "dataset.on_invalid=skip (on_invalid='skip' in Python)"
        )
    if invalid:
        warnings.warn(_describe(path, invalid) + "; these rows were skipped", DataWarning, 2)
    by_row = [dict(zip(data.rows.tolist(), data.graphs, strict=True)) for data in loaded]
    rows = [r for r in loaded[0].rows.tolist() if all(r in found for found in by_row)]
    sets = [
        MoleculeSet(
            tuple(found[r] for found in by_row), by_row[0][r].targets, by_row[0][r].target_mask
        )
        for r in rows
    ]
    skipped = tuple(dict.fromkeys((row, s) for row, _, s in invalid))
    return MoleculeDataset(
        sets,  # type: ignore[arg-type]  # a MoleculeSet stands where a MoleculeGraph would
        loaded[0].target_names,
        path,
        np.array(rows, dtype=np.int64),
        skipped,
    )
