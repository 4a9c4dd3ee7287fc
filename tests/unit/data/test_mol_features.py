"""Extra molecule features (``dataset.features``, ``dataset.feature_columns``), data side: the
sets' values equal RDKit's computed directly, statistics come from the training split alone,
a bad user column is one line naming the key, file, line and column, a descriptor without a
finite value is warned about and the cache never serves features of other names."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from rdkit import Chem
from rdkit.Chem import Descriptors, rdFingerprintGenerator

from foldexp.config.errors import ConfigError
from foldexp.data.errors import MoleculeError
from foldexp.data.mol_features import (
    describe_nonfinite,
    feature_names,
    feature_statistics,
    molecule_features,
)
from foldexp.data.molecules import load_molecule_csv
from foldexp.experiments.molecule_data import molecules_csv
from foldexp.train.app import compose_config

SMILES = ["CCO", "c1ccccc1O", "CC(=O)O", "CCN", "OCCO", "c1ccncc1", "CC(C)O", "ClCCl",
          "CCOCC", "C1CCCCC1"]  # fmt: skip


def _csv(tmp_path: Path, extra: list[str] | None = None, header: str = "smiles,y,own") -> Path:
    rows = [f"{s},{0.5 * k:.1f},{k}" for k, s in enumerate(SMILES)]
    path = tmp_path / "mols.csv"
    path.write_text(header + "\n" + "\n".join(rows + (extra or [])) + "\n")
    return path


def test_rdkit2d_and_morgan_equal_rdkit_computed_directly() -> None:
    mol = Chem.MolFromSmiles("CC(=O)Oc1ccccc1C(=O)O")  # aspirin
    values = molecule_features(mol, ["rdkit2d", "morgan", "morgan_binary"])
    names = feature_names(["rdkit2d", "morgan", "morgan_binary"])
    n = len(Descriptors.descList)
    assert len(values) == len(names) == n + 2 * 2048
    assert names[:2] == [f"rdkit2d:{Descriptors.descList[k][0]}" for k in range(2)]
    direct = np.array([fn(mol) for _, fn in Descriptors.descList], dtype=np.float32)
    np.testing.assert_array_equal(values[:n], direct)
    assert values[names.index("rdkit2d:MolWt")] == pytest.approx(180.159, abs=1e-3)
    gen = rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=2048, includeChirality=True)
    counts = gen.GetCountFingerprintAsNumPy(mol).astype(np.float32)
    np.testing.assert_array_equal(values[n : n + 2048], counts)
    np.testing.assert_array_equal(values[n + 2048 :], (counts > 0).astype(np.float32))
    assert counts.max() > 1  # counts, not bits


def test_statistics_come_from_the_training_split_only(tmp_path: Path) -> None:
    """Dev and test rows hold 1e6 in the user's column: the mean and std must not move."""
    path = tmp_path / "mols.csv"
    rows = [f"{s},{0.5 * k:.1f},{k},{'train' if k < 6 else 'test' if k < 8 else 'dev'}"
            for k, s in enumerate(SMILES)]  # fmt: skip
    rows = [r if r.endswith("train") else r.replace(f",{k},", ",1000000,", 1)
            for k, r in enumerate(rows)]  # fmt: skip
    path.write_text("smiles,y,own,part\n" + "\n".join(rows) + "\n")
    bundle = molecules_csv(str(path), ["y"], split="column", split_column="part",
                           feature_columns=["own"], features=["rdkit2d"])  # fmt: skip
    info = bundle.info
    assert info["feature_names"][-1] == "column:own"
    own = np.arange(6, dtype=np.float64)
    assert info["feature_mean"][-1] == pytest.approx(own.mean())
    assert info["feature_std"][-1] == pytest.approx(own.std())
    assert sorted(g.features[-1] for g in bundle.test) == [1e6, 1e6]  # raw: the model scales
    weights = [Descriptors.MolWt(Chem.MolFromSmiles(s)) for s in SMILES[:6]]
    k = info["feature_names"].index("rdkit2d:MolWt")
    assert info["feature_mean"][k] == pytest.approx(np.mean(weights), rel=1e-5)


def test_statistics_of_constant_and_missing_values() -> None:
    train = np.array([[1.0, 5.0, np.nan], [3.0, 5.0, np.nan], [np.nan, 5.0, np.nan]])
    mean, std = feature_statistics(train)
    assert mean == [2.0, 5.0, 0.0] and std == [1.0, 1.0, 1.0]  # nan left out; constants: 1


def test_a_nonfinite_descriptor_is_named_once(caplog: pytest.LogCaptureFixture) -> None:
    values = np.array([[1.0, np.nan], [2.0, np.nan], [np.inf, 3.0]], dtype=np.float32)
    line = describe_nonfinite(["a", "b"], values, [4, 7, 9])
    assert line == (
        "2 extra feature(s) have no finite value for some molecules and take the training mean "
        "there: a (1 molecules, first row 9); b (2 molecules, first row 4)"
    )
    assert describe_nonfinite(["a"], np.ones((2, 1)), [1, 2]) is None


@pytest.mark.parametrize(
    "cell, shown", [("", "''"), ("nan", "'nan'"), ("abc", "'abc'"), ("1e39", "'1e39'")]
)
def test_a_bad_feature_cell_names_the_file_line_and_column(
    tmp_path: Path, cell: str, shown: str
) -> None:
    path = _csv(tmp_path, [f"CCCC,1.0,{cell}"])
    with pytest.raises(MoleculeError) as err:
        load_molecule_csv(path, target_columns=["y"], feature_columns=["own"])
    assert str(err.value) == (
        f"{path}:12: row 11, column 'own': expected a finite number "
        f"(dataset.feature_columns), got {shown}"
    )


def test_a_missing_feature_column_names_the_key_and_file(tmp_path: Path) -> None:
    path = _csv(tmp_path)
    with pytest.raises(MoleculeError) as err:
        load_molecule_csv(path, target_columns=["y"], feature_columns=["logp"])
    message = str(err.value)
    assert message.startswith(f"dataset.feature_columns=['logp']: {path} has no column 'logp'")
    assert "['smiles', 'y', 'own']" in message and "\n" not in message


def test_an_unknown_feature_set_fails_at_compose_time() -> None:
    with pytest.raises(Exception) as err:
        compose_config(["experiment=esol_weave", "dataset.features=[rdkit3d]"])
    text = str(err.value) + str(err.value.__cause__)
    assert "dataset.features=[rdkit3d]" in text
    assert "rdkit2d, morgan, morgan_binary" in text


def test_a_feature_named_twice_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="dataset.features names rdkit2d twice"):
        molecules_csv(str(_csv(tmp_path)), ["y"], features=["rdkit2d", "rdkit2d"])


def test_the_cache_holds_features_under_their_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from foldexp.data import molecules

    path, cache = _csv(tmp_path), tmp_path / "cache"
    first = load_molecule_csv(path, target_columns=["y"], cache_dir=cache, features=["rdkit2d"])

    def no_rdkit(*_):
        raise AssertionError("featurised again")

    monkeypatch.setattr(molecules, "molecule_features", no_rdkit)
    again = load_molecule_csv(path, target_columns=["y"], cache_dir=cache, features=["rdkit2d"])
    np.testing.assert_array_equal(first[3].features, again[3].features)  # a hit
    for features in (["morgan"], ["rdkit2d", "morgan"]):  # other names: never that cache
        with pytest.raises(AssertionError, match="featurised again"):
            load_molecule_csv(path, target_columns=["y"], cache_dir=cache, features=features)
    monkeypatch.setattr(molecules, "FEATURES_VERSION", 99)  # the sets' values changed
    with pytest.raises(AssertionError, match="featurised again"):
        load_molecule_csv(path, target_columns=["y"], cache_dir=cache, features=["rdkit2d"])
    plain = load_molecule_csv(path, target_columns=["y"], cache_dir=cache)
    assert plain[3].features is None
    own = load_molecule_csv(path, target_columns=["y"], cache_dir=cache, feature_columns=["own"])
    assert [g.features.tolist() for g in own][:3] == [[0.0], [1.0], [2.0]]
    cached = load_molecule_csv(path, target_columns=["y"], cache_dir=cache, feature_columns=["own"])
    assert [g.features.tolist() for g in cached][:3] == [[0.0], [1.0], [2.0]]


def test_a_salt_without_bcut_descriptors_warns_in_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """RDKit gives no BCUT2D values for [Na+].[Cl-]: one warning line names them, how many
    molecules and the first row; the statistics stay finite (over the finite values)."""
    path = _csv(tmp_path, ["[Na+].[Cl-],1.0,3"])
    with caplog.at_level("WARNING", logger="foldexp.data.mol_features"):
        bundle = molecules_csv(str(path), ["y"], features=["rdkit2d"], fractions=[1.0, 0.0, 0.0])
    warned = [r.getMessage() for r in caplog.records if "extra feature" in r.getMessage()]
    assert len(warned) == 1 and "\n" not in warned[0]
    assert "rdkit2d:BCUT2D_MWHI (1 molecules, first row 11)" in warned[0]
    assert np.isfinite(bundle.info["feature_mean"]).all()
    assert np.isfinite(bundle.info["feature_std"]).all()


@pytest.mark.parametrize(("column", "role"), [("y", "a target"), ("smiles", "a SMILES column")])
def test_a_feature_column_that_is_a_target_or_the_smiles_fails_at_compose_time(
    tmp_path: Path, column: str, role: str
) -> None:
    """A target among the features would hand the model its own label."""
    path = _csv(tmp_path)
    with pytest.raises(ConfigError) as err:
        compose_config(
            [
                "experiment=molecules_csv",
                f"dataset.path={path}",
                "dataset.targets=[y]",
                f"dataset.feature_columns=[own,{column}]",
            ]
        )
    assert f"dataset.feature_columns names '{column}', which is {role}" in str(err.value)
    cfg = compose_config(
        ["experiment=molecules_csv", f"dataset.path={path}", "dataset.targets=[y]",
         "dataset.feature_columns=[own]"]
    )  # fmt: skip
    assert list(cfg.dataset.feature_columns) == ["own"]
