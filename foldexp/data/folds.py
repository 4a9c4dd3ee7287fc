"""K-fold cross-validation splits: ``dataset.split=kfold`` (seeded, random) and
``scaffold_kfold`` (Bemis-Murcko scaffold groups never cut).

Fold ``i`` of ``K`` is the test part; dev comes out of the other ``K - 1`` folds, its share
``fractions[1] / (fractions[0] + fractions[1])`` of them (random with the seed for ``kfold``,
by scaffold groups for ``scaffold_kfold``), and train is the rest. Over ``i = 0 … K-1`` the test
parts are disjoint and their union is every index: ``-m dataset.fold=0,1,2,3,4`` runs a whole
cross-validation, and ``foldexp report`` averages it. Like ``splits``, every function is
deterministic and returns sorted int64 index arrays.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from foldexp.data.splits import murcko_scaffold, random_split, scaffold_split

__all__ = ["fold_assignment", "kfold_split", "scaffold_fold_assignment", "scaffold_kfold_split"]


def _check(folds: int, fold: int, n: int) -> None:
    if folds < 2:
        raise ValueError(f"dataset.folds={folds}; expected 2 or more")
    if not 0 <= fold < folds:
        raise ValueError(f"dataset.fold={fold}; expected 0..{folds - 1} (dataset.folds={folds})")
    if n < folds:
        raise ValueError(f"dataset.folds={folds} but only {n} molecules: each fold needs one")


def fold_assignment(n: int, folds: int, seed: int = 0) -> np.ndarray:
    """``(n,)`` each index's fold: a seeded permutation cut into ``folds`` near-equal parts."""
    order = np.random.default_rng(seed).permutation(n)
    out = np.empty(n, dtype=np.int64)
    for k, part in enumerate(np.array_split(order, folds)):
        out[part] = k
    return out


def scaffold_fold_assignment(smiles: Sequence[str], folds: int) -> np.ndarray:
    """``(n,)`` each molecule's fold, whole scaffold groups at a time: groups largest first
    (ties: the first molecule's index) each go to the fold holding fewest molecules so far
    (ties: the lowest fold), which keeps the folds near-equal in size."""
    groups: dict[str, list[int]] = {}
    for i, s in enumerate(smiles):
        groups.setdefault(murcko_scaffold(s), []).append(i)
    sizes = [0] * folds
    out = np.empty(len(smiles), dtype=np.int64)
    for group in sorted(groups.values(), key=lambda g: (-len(g), g[0])):
        k = min(range(folds), key=lambda j: (sizes[j], j))
        out[group] = k
        sizes[k] += len(group)
    return out


def _dev_share(fractions: Sequence[float]) -> tuple[float, float]:
    train, dev = float(fractions[0]), float(fractions[1])
    total = train + dev
    if total <= 0:
        raise ValueError(f"dataset.fractions={list(fractions)}: no share for train and dev")
    return train / total, dev / total


def kfold_split(
    n: int, folds: int, fold: int, fractions: Sequence[float] = (0.8, 0.1, 0.1), seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Train, dev and test indices of fold ``fold`` of ``folds`` (random, ``seed``)."""
    _check(folds, fold, n)
    assigned = fold_assignment(n, folds, seed)
    test = np.flatnonzero(assigned == fold)
    rest = np.flatnonzero(assigned != fold)
    train_k, dev_k = random_split(len(rest), _dev_share(fractions), seed=seed + 1)
    return np.sort(rest[train_k]), np.sort(rest[dev_k]), test.astype(np.int64)


def scaffold_kfold_split(
    smiles: Sequence[str], folds: int, fold: int, fractions: Sequence[float] = (0.8, 0.1, 0.1)
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Train, dev and test indices of fold ``fold`` of ``folds``; no scaffold is in two parts
    (dev from the other folds by ``splits.scaffold_split``)."""
    _check(folds, fold, len(smiles))
    assigned = scaffold_fold_assignment(smiles, folds)
    test = np.flatnonzero(assigned == fold)
    rest = np.flatnonzero(assigned != fold)
    train_k, dev_k = scaffold_split([smiles[int(i)] for i in rest], _dev_share(fractions))
    return np.sort(rest[train_k]), np.sort(rest[dev_k]), test.astype(np.int64)
