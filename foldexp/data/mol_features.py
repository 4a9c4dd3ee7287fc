"""Extra molecule-level features (``dataset.features``, ``dataset.feature_columns``).

A run may join numbers about the whole molecule to its learned readout, as chemprop v2's
``--features-generators`` / extra descriptors do (``foldexp.models.extra_features`` joins
them). The feature sets, by name (:data:`FEATURE_SETS`):

- ``rdkit2d``: every descriptor of RDKit's ``rdkit.Chem.Descriptors.descList`` (217 in RDKit
  2026.09), in that list's order, named ``rdkit2d:<descriptor>``;
- ``morgan``: the Morgan count fingerprint, radius 2, 2,048 bits, chirality included
  (chemprop's ``morgan_count``), ``morgan:<bit>``;
- ``morgan_binary``: the same bits as 0/1 (chemprop's ``morgan_binary``).

and a user's own numeric columns of the CSV (``column:<name>``). Values are float32; a
descriptor RDKit gives as NaN or infinity, or beyond float32's range, is stored as NaN: the
model puts the training mean in its place (0 once standardised), and the builder warns in one
line naming each such descriptor, how many molecules and the first row
(:func:`describe_nonfinite`). A user's column must hold a finite number on every row
(:func:`read_feature_columns` names the file, line and column of one that does not).

Bump :data:`FEATURES_VERSION` whenever a set's values change: it is part of the cache key.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from foldexp.data.errors import MoleculeError

__all__ = [
    "FEATURES_VERSION",
    "FEATURE_SETS",
    "describe_nonfinite",
    "feature_info",
    "feature_statistics",
    "feature_names",
    "molecule_features",
    "number_cell",
    "read_feature_columns",
]

log = logging.getLogger(__name__)

FEATURES_VERSION = 1
MORGAN_RADIUS = 2  # chemprop's morgan_count / morgan_binary
MORGAN_BITS = 2048
_FLOAT32_MAX = float(np.finfo(np.float32).max)


@functools.lru_cache(maxsize=1)
def _descriptors() -> tuple[tuple[str, Callable], ...]:
    from rdkit.Chem import Descriptors

    return tuple(Descriptors.descList)


@functools.lru_cache(maxsize=1)
def _morgan():
    from rdkit.Chem import rdFingerprintGenerator

    return rdFingerprintGenerator.GetMorganGenerator(
        radius=MORGAN_RADIUS, fpSize=MORGAN_BITS, includeChirality=True
    )


def _rdkit2d(mol) -> np.ndarray:
    values = []
    for _, fn in _descriptors():
        try:
            values.append(float(fn(mol)))
        except Exception:  # noqa: BLE001 - RDKit raises anything; the value is then missing
            values.append(math.nan)
    return np.array(values, dtype=np.float64)


def _morgan_count(mol) -> np.ndarray:
    return _morgan().GetCountFingerprintAsNumPy(mol).astype(np.float64)


def _morgan_binary(mol) -> np.ndarray:
    return _morgan().GetFingerprintAsNumPy(mol).astype(np.float64)


#: name → (column names, values of one RDKit molecule).
FEATURE_SETS: dict[str, tuple[Callable[[], list[str]], Callable]] = {
    "rdkit2d": (lambda: [f"rdkit2d:{name}" for name, _ in _descriptors()], _rdkit2d),
    "morgan": (lambda: [f"morgan:{k}" for k in range(MORGAN_BITS)], _morgan_count),
    "morgan_binary": (lambda: [f"morgan_binary:{k}" for k in range(MORGAN_BITS)], _morgan_binary),
}


def _check_sets(features: Sequence[str]) -> None:
    unknown = [f for f in features if f not in FEATURE_SETS]
    if unknown:
        raise ValueError(
            f"dataset.features={list(features)}: {unknown[0]!r} is no feature set; expected "
            f"names from {', '.join(FEATURE_SETS)}"
        )


def feature_names(features: Sequence[str], columns: Sequence[str] = ()) -> list[str]:
    """Every feature's name, in the order of the values: the sets', then ``column:<name>``."""
    _check_sets(features)
    names = [n for f in features for n in FEATURE_SETS[f][0]()]
    return names + [f"column:{c}" for c in columns]


def molecule_features(mol, features: Sequence[str]) -> np.ndarray:
    """``(F,)`` float32 values of the sets ``features`` for one RDKit molecule; NaN where RDKit
    gives no finite value within float32's range."""
    _check_sets(features)
    if not features:
        return np.zeros(0, dtype=np.float32)
    values = np.concatenate([FEATURE_SETS[f][1](mol) for f in features])
    values[~(np.abs(values) <= _FLOAT32_MAX)] = np.nan  # inf, nan, 1e300
    return values.astype(np.float32)


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if abs(value) <= _FLOAT32_MAX else None  # nan, inf, 1e39: no number here


def number_cell(text: str, where: str) -> float:
    """A user feature column's cell as a finite float32 number, else ``MoleculeError`` naming
    ``where`` (file, line, column)."""
    value = _number(text)
    if value is None:
        raise MoleculeError(
            f"{where}: expected a finite number (dataset.feature_columns), got {text!r}"
        )
    return value


def read_feature_columns(
    path: Path, columns: Sequence[str], rows: Sequence[int]
) -> dict[int, np.ndarray]:
    """``{row: (len(columns),) float32}`` of the user's columns for ``rows`` (row numbers as
    ``molecule_csv.read_molecule_rows`` gives them); a column the file lacks, an empty, NaN or
    non-numeric cell is a ``MoleculeError`` of one line naming the key, file, line and column."""
    from foldexp.data.molecule_csv import read_csv_column, record_lines

    if not columns:
        return {int(r): np.zeros(0, dtype=np.float32) for r in rows}
    values = []
    for column in columns:
        try:
            cells = read_csv_column(path, column)
        except MoleculeError as exc:
            if "expected column(s)" not in str(exc):
                raise
            raise MoleculeError(
                f"dataset.feature_columns={list(columns)}: {path} has no column {column!r} "
                f"({str(exc).split('; ', 1)[-1]})"
            ) from None
        values.append(cells)
    out = {}
    for row in rows:
        row = int(row)
        numbers = []
        for column, cells in zip(columns, values, strict=True):
            text = cells.get(row, "")
            if _number(text) is None:
                line = record_lines(path, [row]).get(row, row + 1)
                number_cell(text, f"{path}:{line}: row {row}, column {column!r}")  # raises
            numbers.append(float(text))
        out[row] = np.array(numbers, dtype=np.float32)
    return out


def describe_nonfinite(
    names: Sequence[str], values: np.ndarray, rows: Sequence[int], shown: int = 5
) -> str | None:
    """One line naming each feature that is NaN for some molecules (``values``: ``(N, F)``,
    ``rows``: each molecule's row), how many and the first row; ``None`` when all are finite."""
    bad = ~np.isfinite(values)
    columns = np.flatnonzero(bad.any(0))
    if not len(columns):
        return None
    parts = []
    for k in columns[:shown]:
        where = np.flatnonzero(bad[:, k])
        parts.append(f"{names[k]} ({len(where)} molecules, first row {int(rows[where[0]])})")
    more = f"; and {len(columns) - shown} more features" if len(columns) > shown else ""
    return (
        f"{len(columns)} extra feature(s) have no finite value for some molecules and take the "
        f"training mean there: {'; '.join(parts)}{more}"
    )


def feature_statistics(train: np.ndarray) -> tuple[list[float], list[float]]:
    """Each feature's mean and standard deviation over its finite values in ``train`` (``(N,
    F)``: the training split only); 0 and 1 where none is finite, std 1 for a constant."""
    x = np.asarray(train, dtype=np.float64).reshape(len(train), -1)
    finite = np.isfinite(x)
    count = np.maximum(finite.sum(0), 1)
    mean = np.where(finite, x, 0.0).sum(0) / count
    std = np.sqrt((np.where(finite, x - mean, 0.0) ** 2).sum(0) / count)
    std = np.where(std > 1e-12 * (1.0 + np.abs(mean)), std, 1.0)  # a constant: nothing to scale
    return mean.tolist(), std.tolist()


def feature_info(
    names: list[str], values: np.ndarray, train: np.ndarray, rows: Sequence[int]
) -> dict[str, list]:
    """The ``info`` entries of a run with features: their names and the train split's
    statistics (the model keeps them, ``foldexp.models.extra_features``); a feature that is not
    finite for some of ``values`` (every molecule, ``rows`` theirs) is warned about once."""
    told = describe_nonfinite(names, values, rows)
    if told is not None:
        log.warning("%s", told)
    mean, std = feature_statistics(train)
    return {"feature_names": names, "feature_mean": mean, "feature_std": std}
