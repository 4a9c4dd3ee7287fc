"""``dataset.split=kmeans|kennard_stone``: the parts partition the data in about the fractions,
k-means clusters are never cut and the split repeats with its seed, Kennard–Stone picks the
order worked out by hand, and both run from a config on a tiny CSV."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import foldexp.data.fingerprint_splits as fps
from foldexp.config.errors import ConfigError
from foldexp.experiments.molecule_data import molecules_csv
from foldexp.train.app import compose_config

SMILES = [
    "CCO", "CCCC", "c1ccccc1", "CC(=O)O", "CCN", "OCCO", "c1ccncc1", "CC(C)O", "ClCCl",
    "CCOCC", "C1CCCCC1", "c1ccc2ccccc2c1", "CC#N", "CCCl", "O=C1CCCCC1", "Cc1ccccc1",
    "CS(C)=O", "NCCO", "FC(F)F", "C=CC", "Oc1ccccc1", "CCCCO", "C1CCOC1", "c1ccoc1",
    "CCCCCC", "CCCCCCO", "c1ccc(O)cc1O", "CC(C)(C)O", "OC(=O)CCC(=O)O", "NC(=O)N",
]  # fmt: skip


def _check_partition(parts: tuple[np.ndarray, ...], n: int) -> None:
    joined = np.concatenate(parts)
    assert sorted(joined.tolist()) == list(range(n))  # disjoint, and every index once
    assert all(np.array_equal(p, np.sort(p)) for p in parts)


def test_morgan_bits_are_rdkit_fingerprints() -> None:
    bits = fps.morgan_bits(["CCO", "c1ccccc1"])
    assert bits.shape == (2, 2048) and set(np.unique(bits).tolist()) <= {0, 1}
    # ethanol at radius 2: C, C, O and their environments, 6 distinct bits (RDKit's count)
    assert int(bits[0].sum()) == 6
    with pytest.raises(ValueError, match="could not parse"):
        fps.morgan_bits(["C1CC"])


def test_kmeans_clusters_are_whole_and_seeded() -> None:
    bits = fps.morgan_bits(SMILES)
    for seed in (0, 1, 2):
        labels = fps.kmeans_labels(bits, 6, seed)
        assert labels.min() == 0 and labels.max() < 6
        parts = fps.kmeans_split(SMILES, (0.6, 0.2, 0.2), seed=seed, clusters=6)
        _check_partition(parts, len(SMILES))
        assert all(len(p) for p in parts)
        where = np.empty(len(SMILES), dtype=int)
        for k, part in enumerate(parts):
            where[part] = k
        for c in np.unique(labels):  # a cluster lies in one part
            assert len(set(where[labels == c].tolist())) == 1, (seed, c)
        # test and dev never take more than their share (the rest is train's)
        assert len(parts[2]) <= 6 and len(parts[1]) <= 6
        # the same seed, the same split
        again = fps.kmeans_split(SMILES, (0.6, 0.2, 0.2), seed=seed, clusters=6)
        assert all(np.array_equal(a, b) for a, b in zip(parts, again, strict=True))
    # the default number of clusters is astartes's
    assert fps.default_clusters(30) == 4 and fps.default_clusters(1128) == 113


def test_kmeans_on_separated_points() -> None:
    # three tight groups far apart: every seed finds exactly them
    points = np.array([[0, 0], [0, 1], [1, 0], [50, 50], [51, 50], [-40, 60], [-41, 60]])
    for seed in range(5):
        labels = fps.kmeans_labels(points, 3, seed)
        groups = {tuple(np.flatnonzero(labels == c)) for c in range(3)}
        assert groups == {(0, 1, 2), (3, 4), (5, 6)}


def test_cluster_parts_follow_astartes_rule() -> None:
    # cluster sizes 1 (a), 2 (b), 3 (c), 4 (d); n = 10, fractions 0.6/0.2/0.2: test and dev
    # hold 2 each; smallest first: a → test (1 ≤ 2), b → dev (test 1+2 > 2; dev 2 ≤ 2),
    # c → train, d → train
    labels = np.array([3, 3, 2, 1, 3, 0, 2, 2, 1, 3])
    train, dev, test = fps.cluster_parts(labels, (0.6, 0.2, 0.2))
    assert test.tolist() == [5]
    assert dev.tolist() == [3, 8]
    assert train.tolist() == [0, 1, 2, 4, 6, 7, 9]


def test_kennard_stone_picks_the_hand_worked_order() -> None:
    # points 0, 1, 3, 7, 10 on a line: the farthest pair (0, 10); then 3 and 7 are both 3
    # from the chosen: the lower index (3) first; 7 (3 from 10) before 1 (1 from 0)
    line = np.array([[0.0], [1.0], [3.0], [7.0], [10.0]])
    assert fps.kennard_stone_order(5, fps.euclidean_rows(line)).tolist() == [0, 4, 2, 3, 1]
    # Jaccard: a = {0,1}, b = {2,3}, c = {0,1,2}, d = {0}: d(a,b) = 1 = d(b,d), the first pair
    # in row order is (a, b); then c: min(1/3, 3/4) = 1/3, d: min(1/2, 1) = 1/2 → d, then c
    bits = np.array([[1, 1, 0, 0], [0, 0, 1, 1], [1, 1, 1, 0], [1, 0, 0, 0]])
    rows = fps.jaccard_rows(bits)
    assert rows(np.array([0, 2]))[:, [1, 3]] == pytest.approx(np.array([[1, 0.5], [0.75, 2 / 3]]))
    assert fps.kennard_stone_order(4, rows).tolist() == [0, 1, 3, 2]
    # the same distances a block at a time as all at once
    assert np.allclose(rows(np.arange(4)), np.vstack([rows(np.array([i])) for i in range(4)]))


def test_kennard_stone_of_identical_fingerprints_is_a_partition() -> None:
    # every distance 0: the farthest "pair" was (0, 0), so 0 came twice and 5 never
    assert fps.kennard_stone_order(6, fps.euclidean_rows(np.zeros((6, 1)))).tolist() == [
        0,
        1,
        2,
        3,
        4,
        5,
    ]
    _check_partition(fps.kennard_stone_split(["C"] * 6, (0.5, 0.25, 0.25)), 6)


def test_kennard_stone_split_and_its_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    parts = fps.kennard_stone_split(SMILES, (0.8, 0.1, 0.1))
    _check_partition(parts, len(SMILES))
    assert [len(p) for p in parts] == [24, 3, 3]
    order = fps.kennard_stone_order(len(SMILES), fps.jaccard_rows(fps.morgan_bits(SMILES)))
    assert sorted(order[:24].tolist()) == parts[0].tolist()  # train: the first chosen
    assert sorted(order[27:].tolist()) == parts[2].tolist()  # test: the last chosen
    assert all(np.array_equal(a, b) for a, b in zip(parts, fps.kennard_stone_split(SMILES)))
    monkeypatch.setattr(fps, "MAX_KENNARD_STONE", 10)
    with pytest.raises(ValueError, match=r"30 is above its limit of 10; use dataset.split=kmeans"):
        fps.kennard_stone_split(SMILES)


def test_molecules_csv_kmeans_and_kennard_stone(tmp_path: Path) -> None:
    path = tmp_path / "mols.csv"
    path.write_text("smiles,y\n" + "".join(f"{s},{0.5 * k}\n" for k, s in enumerate(SMILES)))
    for split, keys in (("kmeans", {"clusters": 8, "seed": 3}), ("kennard_stone", {})):
        bundle = molecules_csv(str(path), ["y"], split=split, fractions=(0.6, 0.2, 0.2), **keys)
        parts = [[g.smiles for g in p] for p in (bundle.train, bundle.dev, bundle.test)]
        assert sorted(sum(parts, [])) == sorted(SMILES) and all(parts)
        want = (
            fps.kmeans_split(SMILES, (0.6, 0.2, 0.2), 3, 8)
            if split == "kmeans"
            else fps.kennard_stone_split(SMILES, (0.6, 0.2, 0.2))
        )
        assert parts[2] == [SMILES[i] for i in want[2]]
    # a part no cluster fits: one line naming the key
    with pytest.raises(
        ConfigError, match=r"mols.csv: dataset.split=kmeans: no cluster .* fits into (test|dev)"
    ):
        molecules_csv(str(path), ["y"], split="kmeans", clusters=2, fractions=(0.8, 0.1, 0.1))


def test_split_keys_in_the_schema() -> None:
    base = ["experiment=molecules_csv", "dataset.path=x.csv", "dataset.targets=[y]"]
    cfg = compose_config([*base, "dataset.split=kennard_stone"])
    assert cfg.dataset.split.value == "kennard_stone"
    cfg = compose_config([*base, "dataset.split=kmeans", "dataset.clusters=12"])
    assert cfg.dataset.clusters == 12
    with pytest.raises(ConfigError, match=r"dataset\.clusters"):
        compose_config([*base, "dataset.split=kmeans", "dataset.clusters=-1"])
    with pytest.raises(Exception, match=r"dataset\.split=kmedoids"):  # Hydra's enum check
        compose_config([*base, "dataset.split=kmedoids"])
