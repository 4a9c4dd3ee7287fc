"""What a featurised molecule dataset is: :class:`MoleculeGraph` and :class:`MoleculeDataset`.

A ``MoleculeGraph`` holds one molecule's SMILES, its atom and atom-pair features (``featurize``)
and its targets with the mask of those present; a ``MoleculeDataset`` the molecules of one CSV
file in file order, with each one's row in the file, the rows left out and per-target summaries
(``foldexp data stats``). ``molecules.load_molecule_csv`` builds them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["MoleculeDataset", "MoleculeGraph"]


@dataclass(frozen=True, eq=False)
class MoleculeGraph:
    """One featurised molecule.

    Attributes:
        smiles: The SMILES string as written in the CSV (surrounding whitespace removed).
        atom_features: ``(n_atoms, ATOM_FEATURES)`` float32.
        pair_features: ``(n_atoms, n_atoms, PAIR_FEATURES)`` float32.
        targets: ``(T,)`` float32; 0 where missing.
        target_mask: ``(T,)`` bool; False where the target is missing.
        features: ``(F,)`` float32 molecule-level features as computed (``dataset.features``,
            ``dataset.feature_columns``; NaN where not finite), or ``None`` without any.
    """

    smiles: str
    atom_features: np.ndarray
    pair_features: np.ndarray
    targets: np.ndarray
    target_mask: np.ndarray
    features: np.ndarray | None = None

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
        rows: 1-based data row of each molecule in the CSV: its line - 1 unless a quoted field
            before it spans lines (``molecule_csv.record_lines`` gives the line).
        skipped: ``(row, smiles)`` of rows left out as invalid (``on_invalid="skip"``);
            ``(row, "<why>")`` for a row past a size limit (``max_atoms``, ``max_smiles_chars``).
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

    def target_summary(self) -> list[dict[str, object]]:
        """One row per target: labelled and missing counts, and for a 0/1 column the positives,
        else mean, std, min and max of the labelled values (``foldexp data stats``)."""
        out: list[dict[str, object]] = []
        for k, name in enumerate(self.target_names):
            values = self.targets[:, k][self.target_mask[:, k]].astype(np.float64)
            row: dict[str, object] = {
                "target": name,
                "labelled": int(len(values)),
                "missing": int(len(self) - len(values)),
            }
            if len(values) and np.isin(values, (0.0, 1.0)).all():
                row.update(kind="binary", positives=int(values.sum()))
            elif len(values):
                row.update(
                    kind="numeric",
                    mean=float(values.mean()),
                    std=float(values.std()),
                    min=float(values.min()),
                    max=float(values.max()),
                )
            out.append(row)
        return out

    def __repr__(self) -> str:
        return (
            f"MoleculeDataset({self.source.name}, {len(self)} molecules, "
            f"targets={list(self.target_names)})"
        )
