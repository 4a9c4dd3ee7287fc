"""Two molecules a row (``dataset.smiles_column=[solute, solvent]``, D-MPNN): a run trains,
predict's values are the model's recomputed by hand from the two encoders and the head, shared
and separate encoders have the parameters they should, a batch equals its rows one at a time
(values and gradients), and bad input is refused in one line naming the key, file and column."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

from foldexp.analysis.predict import run_predict
from foldexp.config.errors import ConfigError
from foldexp.data.errors import DataWarning, MoleculeError
from foldexp.data.molecule_sets import MoleculeSet, load_molecule_sets
from foldexp.experiments.molecule_data import molecules_csv
from foldexp.experiments.molecule_features import molecule_inputs
from foldexp.experiments.molecule_set_inputs import set_inputs
from foldexp.models.dmpnn import DMPNNModel, _bond_graph
from foldexp.train.app import compose_config
from foldexp.train.loop import run_train
from foldexp.train.runs import load_trained

SOLUTES = [
    "CCO", "CCCC", "c1ccccc1", "CC(=O)O", "CCN", "OCCO", "c1ccncc1", "CC(C)O", "ClCCl",
    "CCOCC", "C1CCCCC1", "c1ccc2ccccc2c1", "CC#N", "CCCl", "O=C1CCCCC1", "Cc1ccccc1",
]  # fmt: skip
SOLVENTS = ["O", "CO", "CCCCCC", "ClC(Cl)Cl", "CS(C)=O", "CC(C)=O", "c1ccccc1", "O"] * 2


def _csv(tmp_path: Path, name: str = "pairs.csv", solvents: list[str] = SOLVENTS) -> Path:
    path = tmp_path / name
    rows = [f"{a},{b},{(len(a) * 3 + len(b)) % 7}" for a, b in zip(SOLUTES, solvents)]
    path.write_text("solute,solvent,y\n" + "\n".join(rows) + "\n")
    return path


def _args(tmp_path: Path, path: Path, *extra: str) -> list[str]:
    return ["experiment=molecules_csv", "model=dmpnn", "model.hidden_size=8",
            f"dataset.path={path}", "dataset.smiles_column=[solute,solvent]",
            "dataset.targets=[y]", "trainer.epochs=2", "trainer.plots=false",
            "trainer.progress=false", f"paths.cache_dir={tmp_path / 'cache'}", *extra]  # fmt: skip


def test_a_run_trains_and_predict_is_the_model_by_hand(tmp_path: Path) -> None:
    path = _csv(tmp_path)
    run_train(compose_config(_args(tmp_path, path), output_dir=tmp_path / "run"))
    run = load_trained(tmp_path / "run")
    model = run.model
    assert run.info["molecules"] == 2 and model.encode_size == 16
    rows = run_predict(tmp_path / "run", str(path))
    assert [r["solute"] for r in rows] == SOLUTES and [r["solvent"] for r in rows] == SOLVENTS
    # by hand: each column's molecule through its own encoder, the readouts side by side
    two = model.column_encoders[0]
    for row, a, b in zip(rows, SOLUTES, SOLVENTS, strict=True):
        (ga, _), (gb, _) = molecule_inputs([a, b])
        with torch.no_grad():
            ha = model._encode(_bond_graph([ga]), model.w_i, model.w_h, model.w_o)
            hb = model._encode(_bond_graph([gb]), two["w_i"], two["w_h"], two["w_o"])
            z = model.ffn(torch.cat([ha, hb], 1))
            y = z * model.target_std + model.target_mean
        assert float(row["y"]) == pytest.approx(float(y[0, 0]), rel=1e-5, abs=1e-6)
        assert row["error"] == ""
    # fingerprint: both readouts
    fp = run_predict(tmp_path / "run", str(path), fingerprint=True)
    assert len([k for k in fp[0] if k.startswith("fp_")]) == 16


def test_shared_and_separate_encoders_parameter_counts() -> None:
    a, p, h = 10, 4, 6
    encoder = (a + p) * h + h * h + (a + h) * h + h  # w_i, w_h (no bias), w_o with bias
    head = (2 * h) * h + h + h * 1 + 1  # ffn_layers=2: 2h → h, h → 1
    count = lambda m: sum(x.numel() for x in m.parameters())  # noqa: E731
    single = DMPNNModel(a, p, hidden_size=h)
    shared = DMPNNModel(a, p, hidden_size=h, molecules=2, shared_encoder=True)
    separate = DMPNNModel(a, p, hidden_size=h, molecules=2, shared_encoder=False)
    assert count(single) == encoder + h * h + h + h + 1
    assert count(shared) == encoder + head
    assert count(separate) == 2 * encoder + head


def test_batched_equals_one_at_a_time() -> None:
    torch.manual_seed(0)
    parsed = set_inputs(molecule_inputs(SOLUTES[:6]), ["a", "b"],
                        [{"b": s} for s in SOLVENTS[:6]], (1000, 20000))  # fmt: skip
    examples = [e for e, _ in parsed]
    atom = examples[0].molecules[0].atom_features.shape[1]
    pair = examples[0].molecules[0].pair_features.shape[2]
    for shared in (True, False):
        model = DMPNNModel(atom, pair, hidden_size=8, molecules=2, shared_encoder=shared).double()
        together = model.encode(model.collate(examples))
        together.sum().backward()
        grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
        model.zero_grad()
        alone = torch.cat([model.encode(model.collate([e])) for e in examples])
        alone.sum().backward()
        assert torch.allclose(together, alone, atol=1e-10)
        again = [p.grad for p in model.parameters() if p.grad is not None]
        assert all(torch.allclose(g, k, atol=1e-9) for g, k in zip(grads, again, strict=True))
        # each half of the readout is its column's molecule alone
        solutes = _bond_graph([e.molecules[0] for e in examples])
        first = model._encode(solutes, model.w_i, model.w_h, model.w_o)
        assert torch.allclose(together[:, :8], first, atol=1e-10)


def test_loading_sets_names_the_column_of_a_bad_smiles(tmp_path: Path) -> None:
    path = _csv(tmp_path, solvents=SOLVENTS[:3] + ["C1CC"] + SOLVENTS[4:])
    with pytest.raises(MoleculeError, match=r"row 4 \(line 5\), column 'solvent': 'C1CC'"):
        load_molecule_sets(path, smiles_column=["solute", "solvent"], target_columns=["y"])
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", DataWarning)
        data = load_molecule_sets(
            path, smiles_column=["solute", "solvent"], target_columns=["y"], on_invalid="skip"
        )
    assert len(data) == len(SOLUTES) - 1 and 4 not in data.rows.tolist()
    assert isinstance(data[0], MoleculeSet) and data[0].smiles == "CCO"
    assert len(seen) == 1 and "column 'solvent'" in str(seen[0].message)
    # predict: the row's error names the column; the other rows are predicted
    parsed = set_inputs(molecule_inputs(["CCO", "C1CC"]), ["solute", "solvent"],
                        [{"solvent": "C1CC"}, {"solvent": "O"}], (1000, 20000))  # fmt: skip
    assert parsed[0][0] is None and parsed[0][1].startswith("column 'solvent': ")
    assert parsed[1][0] is None and parsed[1][1].startswith("column 'solute': ")


def test_missing_column_and_refusals_are_one_line(tmp_path: Path) -> None:
    path = _csv(tmp_path)
    with pytest.raises(
        ConfigError, match=r"pairs.csv: no column 'solvant', which dataset.smiles_column names"
    ):
        molecules_csv(str(path), ["y"], smiles_column=["solute", "solvant"])
    with pytest.raises(ConfigError, match=r"needs model=dmpnn; model=weave reads one molecule"):
        weave = [a for a in _args(tmp_path, path) if not a.startswith("model")]
        compose_config([*weave, "model=weave"])
    with pytest.raises(ConfigError, match=r"dataset.smiles_column names solute twice"):
        compose_config(_args(tmp_path, path, "dataset.smiles_column=[solute,solute]"))
    with pytest.raises(ConfigError, match=r"expected a column name or a list of 1 to 4"):
        compose_config(_args(tmp_path, path, "dataset.smiles_column=[a,b,c,d,e]"))
    # predict on a file without the second column: refused as a whole, naming it
    run_train(compose_config(_args(tmp_path, path), output_dir=tmp_path / "run"))
    only = tmp_path / "only.csv"
    only.write_text("solute\nCCO\n")
    with pytest.raises(
        ValueError, match=r"only.csv: no column 'solvent' in the header; .*dataset.smiles_column"
    ):
        run_predict(tmp_path / "run", str(only))


def test_scaffold_split_reads_the_first_column(tmp_path: Path) -> None:
    path = _csv(tmp_path)
    bundle = molecules_csv(str(path), ["y"], smiles_column=["solute", "solvent"], split="scaffold")
    single = molecules_csv(str(path), ["y"], smiles_column="solute", split="scaffold")
    for part, alone in zip(
        (bundle.train, bundle.dev, bundle.test), (single.train, single.dev, single.test)
    ):
        assert [e.smiles for e in part] == [g.smiles for g in alone]


def test_each_column_is_cached_under_its_own_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _csv(tmp_path)
    columns = ["solute", "solvent"]
    first = load_molecule_sets(
        path, smiles_column=columns, target_columns=["y"], cache_dir=tmp_path / "c"
    )
    assert len(list((tmp_path / "c").glob("pairs-*.npz"))) == 2  # one a column
    from foldexp.data import featurize

    def no_rdkit(*_: object) -> None:
        raise AssertionError("featurised again: the cache was not read")

    monkeypatch.setattr(featurize, "featurize_mol", no_rdkit)
    again = load_molecule_sets(
        path, smiles_column=columns, target_columns=["y"], cache_dir=tmp_path / "c"
    )
    assert [s.molecules[1].smiles for s in again] == [s.molecules[1].smiles for s in first]
    assert all(
        (a.molecules[1].atom_features == b.molecules[1].atom_features).all()
        for a, b in zip(first, again, strict=True)
    )
    # the columns swapped: other molecules first, from the same two cache files
    swapped = load_molecule_sets(
        path, smiles_column=columns[::-1], target_columns=["y"], cache_dir=tmp_path / "c"
    )
    assert [s.smiles for s in swapped] == SOLVENTS


def test_init_from_a_one_molecule_run(tmp_path: Path) -> None:
    path = _csv(tmp_path)
    single = [a for a in _args(tmp_path, path) if "smiles_column" not in a]
    run_train(compose_config([*single, "dataset.smiles_column=solute"], tmp_path / "one"))
    source = load_trained(tmp_path / "one").model.state_dict()
    start = f"model.init_from={tmp_path / 'one'}"
    shared = _args(tmp_path, path, start, "model.shared_encoder=true", "model.freeze=encoder")
    run_train(compose_config(shared, output_dir=tmp_path / "shared"))
    state = load_trained(tmp_path / "shared").model.state_dict()
    assert all(torch.equal(state[k], source[k]) for k in ("w_i.weight", "w_h.weight"))
    with pytest.raises(ValueError, match=r"no parameter column_encoders\.0\.w_i\.weight"):
        run_train(compose_config(_args(tmp_path, path, start), output_dir=tmp_path / "separate"))
