"""``dataset.split`` of ``molecules_csv``: which molecules are train, dev and test.

``random`` (seeded), ``scaffold`` (Bemis-Murcko groups), ``column`` (a column of the file says),
``kfold`` / ``scaffold_kfold`` (``foldexp.data.folds``), ``kmeans`` (whole k-means clusters of
Morgan fingerprints, ``dataset.clusters``, seeded) and ``kennard_stone`` (the Kennard–Stone
order of the fingerprints; ``foldexp.data.fingerprint_splits``). A split that reads structure
reads each example's ``smiles``: with two SMILES columns a row (``dataset.smiles_column=[a, b]``)
that is the first column's molecule.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from foldexp.config.errors import ConfigError
from foldexp.data.fingerprint_splits import kennard_stone_split, kmeans_split
from foldexp.data.folds import kfold_split, scaffold_kfold_split
from foldexp.data.molecule_csv import read_csv_column, record_lines
from foldexp.data.splits import column_split, random_split, scaffold_split

__all__ = ["MOLECULE_SPLITS", "split_parts"]

#: Every ``dataset.split`` choice of ``molecules_csv``.
MOLECULE_SPLITS = (
    "random",
    "scaffold",
    "column",
    "kfold",
    "scaffold_kfold",
    "kmeans",
    "kennard_stone",
)


def split_parts(
    dataset: Any,
    graphs: Sequence[Any],
    split: str,
    split_column: str | None,
    fractions: tuple[float, ...],
    seed: int,
    folds: tuple[int, int] = (5, 0),
    clusters: int = 0,
) -> tuple[np.ndarray, ...]:
    """Train, dev and test indices into ``graphs`` (the first molecules of ``dataset``)."""
    smiles = [g.smiles for g in graphs]
    if split == "random":
        return random_split(len(graphs), fractions, seed=seed)
    if split == "scaffold":
        return scaffold_split(smiles, fractions)
    if split == "kfold":
        return kfold_split(len(graphs), *folds, fractions, seed)
    if split == "scaffold_kfold":
        return scaffold_kfold_split(smiles, *folds, fractions)
    if split in ("kmeans", "kennard_stone"):
        try:
            if split == "kmeans":
                return kmeans_split(smiles, fractions, seed, clusters)
            return kennard_stone_split(smiles, fractions)
        except ValueError as exc:  # too few clusters for a part, too many molecules
            raise ConfigError(f"{dataset.source}: {exc}") from None
    values = read_csv_column(dataset.source, str(split_column))
    rows = [int(r) for r in dataset.rows[: len(graphs)]]
    where = f"{dataset.source}: column {split_column!r}"
    lines = record_lines(dataset.source, rows)
    labels = [values[r] for r in rows]
    return column_split(labels, rows, fractions, seed, where, [lines[r] for r in rows])
