"""Train/dev/test splits: seeded random splits, the Bemis-Murcko scaffold split, and splits
named by a column of the data (:func:`column_split`).

Splits are returned as index arrays into the dataset, so the same split can be applied to
molecules, trees or any parallel list with :func:`take`. Every function is deterministic: the
same inputs (and seed) always give the same split, and the parts are disjoint and cover every
index exactly once.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TypeVar

import numpy as np

from foldexp.data.errors import FormatError

log = logging.getLogger(__name__)

__all__ = [
    "SPLIT_NAMES",
    "column_split",
    "murcko_scaffold",
    "random_split",
    "scaffold_split",
    "split_sizes",
    "take",
]

T = TypeVar("T")

Fractions = tuple[float, float, float]


def split_sizes(n: int, fractions: Sequence[float] = (0.8, 0.1, 0.1)) -> tuple[int, ...]:
    """Return part sizes that sum to ``n`` (the last part takes the rounding remainder).

    Raises:
        ValueError: A fraction is negative or they do not sum to 1.
    """
    if n < 0:
        raise ValueError(f"n must be non-negative, got {n}")
    if any(f < 0 for f in fractions) or not np.isclose(sum(fractions), 1.0):
        raise ValueError(f"split fractions must be non-negative and sum to 1, got {fractions}")
    sizes = [int(round(f * n)) for f in fractions[:-1]]
    if sum(sizes) > n:  # rounding up twice can overshoot for tiny n
        sizes[-1] -= sum(sizes) - n
    return (*sizes, n - sum(sizes))


def random_split(
    n: int, fractions: Sequence[float] = (0.8, 0.1, 0.1), seed: int = 0
) -> tuple[np.ndarray, ...]:
    """Shuffle ``range(n)`` with ``seed`` and cut it into parts of the given fractions.

    Returns:
        One sorted int64 index array per fraction.
    """
    order = np.random.default_rng(seed).permutation(n)
    bounds = np.cumsum(split_sizes(n, fractions))[:-1]
    return tuple(np.sort(part).astype(np.int64) for part in np.split(order, bounds))


def murcko_scaffold(smiles: str) -> str:
    """Return the Bemis-Murcko scaffold SMILES of a molecule ("" for acyclic molecules).

    Raises:
        ValueError: RDKit cannot parse ``smiles``.
    """
    from rdkit import Chem, rdBase  # lazy: keep `import foldexp.data` free of RDKit
    from rdkit.Chem.Scaffolds import MurckoScaffold

    with rdBase.BlockLogs():
        mol = Chem.MolFromSmiles(smiles)
    if mol is None:
        raise ValueError(f"RDKit could not parse SMILES {smiles!r}")
    return MurckoScaffold.MurckoScaffoldSmiles(mol=mol, includeChirality=False)


def scaffold_split(
    smiles: Sequence[str], fractions: Sequence[float] = (0.8, 0.1, 0.1)
) -> tuple[np.ndarray, ...]:
    """Split molecules so that no Bemis-Murcko scaffold appears in two parts.

    Molecules are grouped by scaffold; groups are sorted largest first (ties: the group whose
    first molecule comes first) and each group goes to the first part that it still fits into,
    in order train, dev, test; a group too large for any remaining part goes to the last part.
    Large, common scaffolds therefore land in train and dev/test hold rarer chemistry, which is
    the point of the split: it measures generalisation to new scaffolds.

    Args:
        smiles: One SMILES per molecule.
        fractions: Target part sizes (the parts are only approximately this size, since
            scaffold groups are never broken up).

    Returns:
        One sorted int64 index array per fraction.
    """
    groups: dict[str, list[int]] = {}
    for i, s in enumerate(smiles):
        groups.setdefault(murcko_scaffold(s), []).append(i)
    ordered = sorted(groups.values(), key=lambda g: (-len(g), g[0]))
    capacity = [f * len(smiles) for f in fractions]
    parts: list[list[int]] = [[] for _ in fractions]
    for group in ordered:
        for k, part in enumerate(parts):
            if len(part) + len(group) <= capacity[k] or k == len(parts) - 1:
                part.extend(group)
                break
    return tuple(np.array(sorted(p), dtype=np.int64) for p in parts)


def take(items: Sequence[T], indices: np.ndarray | Sequence[int]) -> list[T]:
    """Return ``[items[i] for i in indices]``."""
    return [items[int(i)] for i in indices]


#: A split column's values (compared lower-case) → part: 0 train, 1 dev, 2 test.
SPLIT_NAMES = {
    "train": 0,
    "training": 0,
    "valid": 1,
    "validation": 1,
    "val": 1,
    "dev": 1,
    "test": 2,
    "testing": 2,
}


def column_split(
    labels: Sequence[str],
    rows: Sequence[int],
    fractions: Sequence[float] = (0.8, 0.1, 0.1),
    seed: int = 0,
    where: str = "the split column",
    lines: Sequence[int] | None = None,
) -> tuple[np.ndarray, ...]:
    """The parts a column names: ``train``, ``valid``/``dev``/``validation``/``val`` or ``test``
    (any case) for each example.

    A file that names train and test only (as many benchmark files do) gets its dev part drawn
    from train at random with ``seed``: ``fractions[1] / (fractions[0] + fractions[1])`` of it,
    with a warning saying so (how many rows, and how to name them instead).

    Args:
        labels: Each example's value in the column.
        rows: Each example's row in the file (named in errors).
        fractions: Only used to draw dev from train, as above.
        seed: Seed of that draw.
        where: The file and column, for error messages.
        lines: The line each example starts on (named in errors); ``None``: its row + 1, which
            holds unless a quoted field before it spans lines.

    Raises:
        FormatError: A value is none of the above (naming its row), or there is no train or
            no test example, or train is too small to give dev a share.
    """
    part = np.empty(len(labels), dtype=np.int64)
    for i, label in enumerate(labels):
        k = SPLIT_NAMES.get(label.strip().lower())
        if k is None:
            line = rows[i] + 1 if lines is None else lines[i]
            raise FormatError(
                f"{where}: row {rows[i]} (line {line}) says {label!r}; expected train, "
                "valid (or dev) or test"
            )
        part[i] = k
    train, dev, test = (np.flatnonzero(part == k) for k in range(3))
    for name, idx in (("train", train), ("test", test)):
        if not len(idx):
            raise FormatError(f"{where}: no row says {name}; expected train, valid and test rows")
    if not len(dev):  # train/test only: dev comes out of train
        share = fractions[1] / max(fractions[0] + fractions[1], 1e-12)
        n_dev = int(round(share * len(train)))
        if not 0 < n_dev < len(train):
            raise FormatError(
                f"{where}: names no valid rows, and {len(train)} train rows with dev share "
                f"{share:.3g} (from the fractions) leave no dev or no train example"
            )
        chosen = np.random.default_rng(seed).permutation(len(train))[:n_dev]
        dev = np.sort(train[chosen])
        train = np.setdiff1d(train, dev)
        # said, not done quietly: the user's train rows are fewer than the file's
        log.warning(
            "%s names train and test rows only: dev is %d of its %d train rows, drawn at "
            "random (seed %d; its share from dataset.fractions); to choose them, give those "
            "rows the value valid (or dev)", where, n_dev, n_dev + len(train), seed,
        )  # fmt: skip
    return tuple(p.astype(np.int64) for p in (train, dev, test))
