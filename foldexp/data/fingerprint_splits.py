"""Splits on Morgan fingerprints: ``dataset.split=kmeans`` and ``dataset.split=kennard_stone``.

Both read each molecule as its Morgan fingerprint (radius 2, 2,048 bits: chemprop v2's choice,
which hands the splits to astartes) and are built on numpy alone:

- ``kmeans``: Lloyd's k-means (k-means++ start, seeded) in the bits' Euclidean space, as
  astartes runs scikit-learn's ``KMeans``; ``clusters`` groups (0: ``n // 10 + 1``, astartes's
  default). Clusters are never cut: smallest first (ties: the cluster whose first molecule comes
  first), each goes to test while test has room for it, else to dev while dev has room, else to
  train — astartes's rule, so test and dev hold the small, outlying clusters.
- ``kennard_stone``: Kennard & Stone (1969) under the Jaccard (Tanimoto) distance
  ``1 - |a ∧ b| / |a ∨ b|``: the two most distant molecules first, then each time the molecule
  farthest from all chosen so far (its distance to the nearest chosen one, ties: the lowest
  index). The order's first ``fractions[0]`` are train, as in astartes; then dev; test is what is
  chosen last (the molecules most like the rest). Deterministic; the seed is not used.

Distances are computed a block of rows at a time (a float32 product; one row from its few set
bits), so memory stays ``O(n)`` (the fingerprints, 8 KB a molecule) beyond a bounded block; time
is ``O(n²)``, and above ``MAX_KENNARD_STONE``
molecules the split is refused in one line. Like ``splits``, the parts are sorted int64 index
arrays, disjoint, covering every index.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from foldexp.data.splits import split_sizes

__all__ = [
    "FP_BITS",
    "FP_RADIUS",
    "MAX_KENNARD_STONE",
    "cluster_parts",
    "default_clusters",
    "euclidean_rows",
    "jaccard_rows",
    "kennard_stone_order",
    "kennard_stone_split",
    "kmeans_labels",
    "kmeans_split",
    "morgan_bits",
]

FP_RADIUS = 2
FP_BITS = 2048
#: Kennard–Stone compares every pair: 10,000 molecules take about 20 s on two cores (and
#: 80 MB of fingerprints), and the time grows as n².
MAX_KENNARD_STONE = 20_000
_BLOCK_BYTES = 32 << 20  # one block of distances (or of AND-ed words) at most

#: ``rows(indices)`` → ``(len(indices), n)`` distances of those points to every point.
RowDistances = Callable[[np.ndarray], np.ndarray]


def morgan_bits(smiles: Sequence[str]) -> np.ndarray:
    """``(n, FP_BITS)`` uint8: each molecule's Morgan fingerprint (radius ``FP_RADIUS``).

    Raises:
        ValueError: RDKit cannot parse a SMILES (a loaded dataset's SMILES all parse).
    """
    from rdkit import Chem, rdBase  # lazy: keep `import foldexp.data` free of RDKit
    from rdkit.Chem import rdFingerprintGenerator

    generator = rdFingerprintGenerator.GetMorganGenerator(radius=FP_RADIUS, fpSize=FP_BITS)
    out = np.zeros((len(smiles), FP_BITS), dtype=np.uint8)
    for i, s in enumerate(smiles):
        with rdBase.BlockLogs():
            mol = Chem.MolFromSmiles(s)
        if mol is None:
            raise ValueError(f"RDKit could not parse SMILES {s!r}")
        out[i] = generator.GetFingerprintAsNumPy(mol)
    return out


def _rows_per_block(n: int) -> int:
    """Rows of an ``(rows, n)`` block of float64 (or smaller) within ``_BLOCK_BYTES``."""
    return max(1, _BLOCK_BYTES // max(1, n * 8))


# ---------------------------------------------------------------------- k-means


def default_clusters(n: int) -> int:
    """``dataset.clusters=0``: ``n // 10 + 1`` clusters (astartes's default)."""
    return n // 10 + 1


def _squared_distances(x: np.ndarray, centers: np.ndarray) -> np.ndarray:
    """``(len(x), len(centers))`` squared Euclidean distances (never below 0)."""
    d = (x * x).sum(1)[:, None] - 2.0 * x @ centers.T + (centers * centers).sum(1)[None, :]
    return np.maximum(d, 0.0)


def _to_point(x: np.ndarray, columns: np.ndarray, norms: np.ndarray, p: np.ndarray) -> np.ndarray:
    """``(n,)`` squared distances of every row of ``x`` to ``p``, reading only the columns
    (``columns = x.T``) where ``p`` is not 0: a fingerprint's few dozen of 2,048."""
    on = np.flatnonzero(p)
    return np.maximum(norms - 2.0 * (p[on] @ columns[on]) + float(p @ p), 0.0)


def _nearest(x: np.ndarray, centers: np.ndarray) -> np.ndarray:
    """Each point's nearest center (ties: the lowest), a block of rows at a time."""
    out = np.empty(len(x), dtype=np.int64)
    step = _rows_per_block(len(centers))
    for start in range(0, len(x), step):
        out[start : start + step] = _squared_distances(x[start : start + step], centers).argmin(1)
    return out


def _kmeans_pp(x: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """k-means++ seeding: each next center drawn with probability ∝ its squared distance to
    the nearest center so far; fewer than ``k`` when the points have fewer distinct values."""
    columns, norms = np.ascontiguousarray(x.T), (x * x).sum(1)
    chosen = [int(rng.integers(len(x)))]
    d2 = _to_point(x, columns, norms, x[chosen[0]]).astype(np.float64)
    while len(chosen) < k and d2.sum() > 0:
        chosen.append(int(rng.choice(len(x), p=d2 / d2.sum())))
        d2 = np.minimum(d2, _to_point(x, columns, norms, x[chosen[-1]]))
    return x[chosen].copy()


def kmeans_labels(points: np.ndarray, k: int, seed: int = 0, max_iter: int = 50) -> np.ndarray:
    """``(n,)`` each point's cluster, ``0 … k'-1`` (``k' <= k``, fewer when the points have
    fewer distinct values): Lloyd's iterations from a seeded k-means++ start until no point
    changes cluster (or ``max_iter``); an emptied cluster keeps its center."""
    x = np.asarray(points, dtype=np.float32)
    if not 1 <= k:
        raise ValueError(f"k-means needs k >= 1, got {k}")
    centers = _kmeans_pp(x, min(k, len(x)), np.random.default_rng(seed))
    labels = _nearest(x, centers)
    for _ in range(max_iter):
        sums = np.zeros_like(centers)
        np.add.at(sums, labels, x)
        counts = np.bincount(labels, minlength=len(centers))
        filled = counts > 0
        centers[filled] = sums[filled] / counts[filled, None]
        new = _nearest(x, centers)
        if np.array_equal(new, labels):
            break
        labels = new
    _, dense = np.unique(labels, return_inverse=True)  # numbered without gaps
    return dense.astype(np.int64)


def cluster_parts(
    labels: np.ndarray, fractions: Sequence[float] = (0.8, 0.1, 0.1)
) -> tuple[np.ndarray, ...]:
    """Whole clusters into train, dev and test (astartes's rule, see the module docstring):
    smallest first (ties: the lowest first member), to test while it fits in test's share, else
    dev while it fits in dev's, else train."""
    labels = np.asarray(labels)
    _, dev_size, test_size = split_sizes(len(labels), fractions)
    members: dict[int, list[int]] = {}
    for i, c in enumerate(labels.tolist()):
        members.setdefault(c, []).append(i)
    parts: list[list[int]] = [[], [], []]
    for group in sorted(members.values(), key=lambda g: (len(g), g[0])):
        if len(parts[2]) + len(group) <= test_size:
            parts[2].extend(group)
        elif len(parts[1]) + len(group) <= dev_size:
            parts[1].extend(group)
        else:
            parts[0].extend(group)
    return tuple(np.array(sorted(p), dtype=np.int64) for p in parts)


def kmeans_split(
    smiles: Sequence[str],
    fractions: Sequence[float] = (0.8, 0.1, 0.1),
    seed: int = 0,
    clusters: int = 0,
) -> tuple[np.ndarray, ...]:
    """``dataset.split=kmeans``: k-means on Morgan fingerprints, whole clusters a part.

    Raises:
        ValueError: a part given a share gets no cluster (naming ``dataset.clusters``).
    """
    k = clusters or default_clusters(len(smiles))
    parts = cluster_parts(kmeans_labels(morgan_bits(smiles), k, seed), fractions)
    for name, share, part in zip(("train", "dev", "test"), fractions, parts, strict=True):
        if share > 0 and not len(part):
            raise ValueError(
                f"dataset.split=kmeans: no cluster of the {len(smiles)} molecules fits into "
                f"{name} (its share {share:g}); more, smaller clusters: raise dataset.clusters "
                f"(now {k})"
            )
    return parts


# ---------------------------------------------------------------------- Kennard–Stone


def jaccard_rows(bits: np.ndarray) -> RowDistances:
    """Jaccard distances over 0/1 rows (two empty rows: distance 0). A block of rows is one
    float32 product; one row (each Kennard–Stone step) sums the columns of its set bits only,
    a fingerprint's few dozen of 2,048."""
    columns = np.ascontiguousarray(np.asarray(bits, dtype=np.float32).T)  # (bits, n)
    ones = columns.sum(0)

    def rows(index: np.ndarray) -> np.ndarray:
        if len(index) == 1:
            both = columns[np.flatnonzero(columns[:, index[0]])].sum(0)[None, :]
        else:
            both = columns[:, index].T @ columns
        union = ones[index][:, None] + ones[None, :] - both
        return 1.0 - np.divide(both, union, out=np.ones(union.shape, np.float32), where=union > 0)

    return rows


def euclidean_rows(points: np.ndarray) -> RowDistances:
    """Euclidean distances between real-valued rows."""
    x = np.asarray(points, dtype=np.float64)

    def rows(index: np.ndarray) -> np.ndarray:
        return np.sqrt(_squared_distances(x[index], x))

    return rows


def kennard_stone_order(n: int, rows: RowDistances) -> np.ndarray:
    """``(n,)`` the Kennard–Stone order of ``n`` points (see the module docstring), from
    ``rows`` (``jaccard_rows``, ``euclidean_rows``), a block of rows at a time."""
    if n <= 2:
        return np.arange(n, dtype=np.int64)
    step = _rows_per_block(n)
    best, pair = -1.0, (0, 1)
    for start in range(0, n, step):  # the farthest pair, first in row-major order
        block = rows(np.arange(start, min(start + step, n)))
        k = int(block.argmax())
        if block.flat[k] > best:
            best, pair = float(block.flat[k]), (start + k // n, k % n)
    if pair[0] == pair[1]:  # every distance 0 (one fingerprint for all): a point twice else
        pair = (0, 1)
    order = [min(pair), max(pair)]
    nearest = np.minimum(*rows(np.array(order)))  # each point's distance to the chosen
    nearest[order] = -1.0
    while len(order) < n:
        pick = int(nearest.argmax())
        order.append(pick)
        nearest = np.minimum(nearest, rows(np.array([pick]))[0])
        nearest[order] = -1.0
    return np.array(order, dtype=np.int64)


def kennard_stone_split(
    smiles: Sequence[str], fractions: Sequence[float] = (0.8, 0.1, 0.1)
) -> tuple[np.ndarray, ...]:
    """``dataset.split=kennard_stone``: the Kennard–Stone order on Morgan fingerprints (Jaccard
    distance) cut into train, dev and test.

    Raises:
        ValueError: more than ``MAX_KENNARD_STONE`` molecules (one line saying what to use).
    """
    if len(smiles) > MAX_KENNARD_STONE:
        raise ValueError(
            f"dataset.split=kennard_stone compares every pair of molecules: {len(smiles):,} is "
            f"above its limit of {MAX_KENNARD_STONE:,}; use dataset.split=kmeans or scaffold"
        )
    order = kennard_stone_order(len(smiles), jaccard_rows(morgan_bits(smiles)))
    bounds = np.cumsum(split_sizes(len(smiles), fractions))[:-1]
    return tuple(np.sort(part).astype(np.int64) for part in np.split(order, bounds))
