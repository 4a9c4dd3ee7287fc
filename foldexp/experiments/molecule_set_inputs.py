"""``foldexp predict`` (and ``fingerprint``) for a run on several SMILES columns a row
(``dataset.smiles_column=[solute, solvent]``): each input row's molecules as one example.

The first column is predict's input column; the others are read from the row's other cells.
A SMILES that cannot be read in any column is that row's error, naming the column; a file
without one of the columns is refused as a whole (``predict_inputs.check_columns``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from foldexp.config.molecule_columns import smiles_columns
from foldexp.data.molecule_sets import MoleculeSet
from foldexp.experiments.molecule_features import molecule_inputs

__all__ = ["run_smiles_columns", "set_inputs"]


def run_smiles_columns(dataset: Mapping[str, Any]) -> list[str]:
    """A run's SMILES columns (its ``dataset.smiles_column``), one or several."""
    columns = smiles_columns(dataset.get("smiles_column", "smiles"))
    return [columns] if isinstance(columns, str) else columns


def set_inputs(
    first: list[tuple[Any | None, str | None]],
    columns: Sequence[str],
    cells: Sequence[Mapping[str, str]] | None,
    limits: tuple[int, int],
) -> list[tuple[MoleculeSet | None, str | None]]:
    """Each row's molecules as a ``MoleculeSet`` (no targets), or ``(None, why)`` naming the
    column whose SMILES cannot be read. ``first``: the first column's parsed molecules;
    ``cells``: each row's other cells by column, which hold the other columns' SMILES."""
    rows = cells if cells is not None else [{} for _ in first]
    parsed = [first] + [molecule_inputs([r.get(c, "") for r in rows], *limits) for c in columns[1:]]
    none = np.zeros(0, dtype=np.float32)
    out: list[tuple[MoleculeSet | None, str | None]] = []
    for k in range(len(first)):
        bad = [(c, p[k][1]) for c, p in zip(columns, parsed, strict=True) if p[k][0] is None]
        if bad:
            out.append((None, "; ".join(f"column {c!r}: {why}" for c, why in bad)))
            continue
        graphs = tuple(p[k][0] for p in parsed)
        out.append((MoleculeSet(graphs, none, none.astype(bool)), None))
    return out
