"""Unit tests for molecule featurisation, CSV loading, invalid SMILES and the on-disk cache."""

from __future__ import annotations

import numpy as np
import pytest

from foldexp.data import featurize, molecules
from foldexp.data.errors import DatasetNotFoundError, DataWarning, MoleculeError
from foldexp.data.featurize import (
    ATOM_FEATURE_NAMES,
    ATOM_FEATURES,
    PAIR_FEATURE_NAMES,
    PAIR_FEATURES,
    featurize_mol,
    parse_smiles,
)
from foldexp.data.molecules import load_molecule_csv

A = {name: i for i, name in enumerate(ATOM_FEATURE_NAMES)}
P = {name: i for i, name in enumerate(PAIR_FEATURE_NAMES)}


def features(smiles):
    return featurize_mol(parse_smiles(smiles))


def test_sizes_and_shapes():
    assert ATOM_FEATURES == len(ATOM_FEATURE_NAMES) == 44
    assert PAIR_FEATURES == len(PAIR_FEATURE_NAMES) == 14
    atoms, pairs = features("CC(=O)Oc1ccccc1C(=O)O")  # aspirin: 13 heavy atoms
    assert atoms.shape == (13, ATOM_FEATURES) and atoms.dtype == np.float32
    assert pairs.shape == (13, 13, PAIR_FEATURES) and pairs.dtype == np.float32
    np.testing.assert_array_equal(pairs, pairs.transpose(1, 0, 2))  # symmetric
    assert not pairs[np.arange(13), np.arange(13)].any()  # zero diagonal
    # off the diagonal, exactly one bond type and one distance bucket per pair
    off = ~np.eye(13, dtype=bool)
    assert np.all(pairs[off][:, P["bond=none"] : P["bond=other"] + 1].sum(1) == 1)
    assert np.all(pairs[off][:, P["distance=1"] : P["distance>=7"] + 1].sum(1) == 1)


def test_known_bonds_and_atoms():
    atoms, pairs = features("C=O")  # formaldehyde
    assert pairs[0, 1, P["bond=double"]] == 1 and pairs[0, 1, P["distance=1"]] == 1
    assert atoms[0, A["element=C"]] == 1 and atoms[1, A["element=O"]] == 1
    assert atoms[0, A["num_h=2"]] == 1 and atoms[0, A["hybrid=sp2"]] == 1
    assert atoms[1, A["hbond_acceptor"]] == 1

    atoms, pairs = features("c1ccccc1")  # benzene
    assert pairs[0, 1, P["bond=aromatic"]] == 1
    assert pairs[0, 3, P["bond=none"]] == 1 and pairs[0, 3, P["distance=3"]] == 1
    assert pairs[0, 3, P["same_ring"]] == 1
    assert np.all(atoms[:, A["rings_of_size_6"]] == 1) and np.all(atoms[:, A["aromatic"]] == 1)

    atoms, _ = features("C#N")
    assert atoms[0, A["hybrid=sp"]] == 1

    atoms, _ = features("N[C@@H](C)C(=O)O")  # L-alanine is S
    assert atoms[1, A["chirality=S"]] == 1 and atoms[:, A["chirality=R"]].sum() == 0
    assert atoms[0, A["hbond_donor"]] == 1

    atoms, pairs = features("[Na+].[Cl-]")  # two fragments: no distance bucket between them
    assert atoms[0, A["element=other"]] == 1 and atoms[0, A["formal_charge"]] == 1
    assert atoms[1, A["formal_charge"]] == -1
    assert pairs[0, 1, P["bond=none"]] == 1
    assert pairs[0, 1, P["distance=1"] : P["distance>=7"] + 1].sum() == 0

    _, pairs = features("CCCCCCCCCC")  # decane: long distances share the 7+ bucket
    assert pairs[0, 9, P["distance>=7"]] == 1 and pairs[0, 6, P["distance=6"]] == 1


def test_invalid_smiles_parse_to_none():
    assert parse_smiles("C1CC") is None
    assert parse_smiles("not a smiles") is None
    assert parse_smiles("") is None
    # RDKit alone reads what follows a space as a name: both would be ethanol.
    assert parse_smiles("CCO c1ccccc1") is None and parse_smiles("CCO\tethanol") is None
    assert parse_smiles(" CCO ") is not None  # surrounding whitespace is not part of it


CSV = "name,smiles,y1,y2\na,CCO,1.5,\nb,c1ccccc1,-2,3\nc, CC(=O)O ,nan,4\n"


def write(tmp_path, text, name="mols.csv"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_load_csv_with_missing_targets(tmp_path):
    ds = load_molecule_csv(write(tmp_path, CSV), target_columns=["y1", "y2"])
    assert len(ds) == 3 and ds.target_names == ("y1", "y2")
    assert ds.smiles == ["CCO", "c1ccccc1", "CC(=O)O"]
    np.testing.assert_array_equal(ds.targets, [[1.5, 0], [-2, 3], [0, 4]])
    np.testing.assert_array_equal(ds.target_mask, [[True, False], [True, True], [False, True]])
    assert ds[1].n_atoms == 6 and ds[1].targets.dtype == np.float32
    assert ds.rows.tolist() == [1, 2, 3]
    sub = ds.subset([2, 0])
    assert sub.smiles == ["CC(=O)O", "CCO"] and sub.rows.tolist() == [3, 1]


def test_csv_errors(tmp_path):
    with pytest.raises(MoleculeError, match=r"mols\.csv:1: expected column\(s\) \['logp'\]"):
        load_molecule_csv(write(tmp_path, CSV), target_columns="logp")
    bad_value = "smiles,y\nCCO,1\nCCC,high\n"
    with pytest.raises(MoleculeError, match=r"mols\.csv:3: row 2, column 'y': expected a number"):
        load_molecule_csv(write(tmp_path, bad_value), target_columns="y")
    short = "smiles,y\nCCO\n"
    with pytest.raises(MoleculeError, match=r"mols\.csv:2: row 1: expected 2 fields, got 1"):
        load_molecule_csv(write(tmp_path, short), target_columns="y")
    with pytest.raises(FileNotFoundError):
        load_molecule_csv(tmp_path / "nope.csv", target_columns="y")


INVALID = "smiles,y\nCCO,1\nC1CC,2\nCCN,3\nxyz,4\n"


def test_invalid_smiles_raise_with_rows(tmp_path):
    with pytest.raises(MoleculeError) as info:
        load_molecule_csv(write(tmp_path, INVALID), target_columns="y")
    message = str(info.value)
    assert "mols.csv: 2 invalid SMILES" in message
    assert "row 2 (line 3): 'C1CC'" in message and "row 4 (line 5): 'xyz'" in message
    assert "on_invalid='skip'" in message
    # the override as typed on the command line, and what it would drop
    assert "drop these 2 of the 4 rows with dataset.on_invalid=skip" in message


def test_invalid_smiles_skip_warns_every_time(tmp_path):
    path = write(tmp_path, INVALID)
    cache = tmp_path / "cache"
    for _ in range(2):  # second load comes from the cache and must warn again
        with pytest.warns(DataWarning, match=r"2 invalid SMILES.*'C1CC'.*skipped"):
            ds = load_molecule_csv(path, target_columns="y", on_invalid="skip", cache_dir=cache)
        assert ds.smiles == ["CCO", "CCN"] and ds.rows.tolist() == [1, 3]
        assert ds.skipped == ((2, "C1CC"), (4, "xyz"))
        np.testing.assert_array_equal(ds.targets[:, 0], [1, 3])


def test_cache_hit_avoids_featurisation(tmp_path, monkeypatch):
    path = write(tmp_path, CSV)
    cache = tmp_path / "cache"
    first = load_molecule_csv(path, target_columns=["y1", "y2"], cache_dir=cache)
    assert len(list(cache.glob("*.npz"))) == 1 and not list(cache.glob("*.tmp"))

    def boom(mol):
        raise AssertionError("featurised although the cache should have been used")

    monkeypatch.setattr(featurize, "featurize_mol", boom)
    second = load_molecule_csv(path, target_columns=["y1", "y2"], cache_dir=cache)
    for a, b in zip(first, second, strict=True):
        assert a.smiles == b.smiles
        np.testing.assert_array_equal(a.atom_features, b.atom_features)
        np.testing.assert_array_equal(a.pair_features, b.pair_features)
        assert b.pair_features.dtype == np.float32
        np.testing.assert_array_equal(a.target_mask, b.target_mask)

    # different content or options -> a different cache entry, featurised again
    with pytest.raises(AssertionError, match="featurised although"):
        load_molecule_csv(path, target_columns=["y1"], cache_dir=cache)
    path.write_text(CSV.replace("CCO", "CCCO"), encoding="utf-8")
    with pytest.raises(AssertionError, match="featurised although"):
        load_molecule_csv(path, target_columns=["y1", "y2"], cache_dir=cache)


def test_damaged_cache_is_rebuilt(tmp_path):
    path = write(tmp_path, CSV)
    cache = tmp_path / "cache"
    load_molecule_csv(path, target_columns="y1", cache_dir=cache)
    (entry,) = cache.glob("*.npz")
    entry.write_bytes(b"garbage")
    ds = load_molecule_csv(path, target_columns="y1", cache_dir=cache)
    assert len(ds) == 3 and entry.stat().st_size > 100


def test_named_dataset_missing(tmp_path):
    with pytest.raises(DatasetNotFoundError, match="foldexp data import esol"):
        molecules.load_esol(tmp_path)
