"""Molecule features joined to the readout (``dataset.features``, ``dataset.feature_columns``):
a run trains with them, keeps the training split's statistics in ``best.pt``, and ``foldexp
predict`` gives what the model computes by hand from RDKit's values; predict's input needs the
run's feature columns (a missing one refuses the file, a bad cell costs its row)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from rdkit import Chem

from foldexp.cli import main
from foldexp.data.mol_features import molecule_features
from foldexp.experiments.molecule_features import molecule_inputs
from foldexp.models.extra_features import init_features, join_features
from foldexp.train.app import compose_config
from foldexp.train.loop import run_train
from foldexp.train.runs import load_trained

SMILES = [
    "CCO", "CCCC", "c1ccccc1", "CC(=O)O", "CCN", "OCCO", "c1ccncc1", "CC(C)O", "ClCCl",
    "CCOCC", "C1CCCCC1", "c1ccc2ccccc2c1", "CC#N", "CCCl", "O=C1CCCCC1", "Cc1ccccc1",
]  # fmt: skip


def _train(tmp_path: Path, model: list[str], features: list[str]) -> Path:
    path = tmp_path / "mols.csv"
    rows = [f"m{k},{s},{0.3 * len(s):.2f},{k % 5}" for k, s in enumerate(SMILES)]
    path.write_text("id,smiles,y,own\n" + "\n".join(rows) + "\n")
    args = ["experiment=molecules_csv", f"dataset.path={path}", "dataset.targets=[y]",
            "trainer.epochs=2", "trainer.plots=false", "trainer.progress=false",
            f"paths.cache_dir={tmp_path / 'cache'}", *model, *features]  # fmt: skip
    run_train(compose_config(args, output_dir=tmp_path / "run"))
    return tmp_path / "run"


DMPNN = ["model=dmpnn", "model.hidden_size=12"]
WEAVE = ["model.atom_size=4", "model.pair_size=4", "model.graph_size=6", "model.mlp_size=5"]
BOTH = ["dataset.features=[rdkit2d]", "dataset.feature_columns=[own]"]


def _predict(tmp_path: Path, run_dir: Path, text: str) -> list[list[str]]:
    (tmp_path / "in.csv").write_text(text)
    out = tmp_path / "out.csv"
    assert main(["predict", str(run_dir), str(tmp_path / "in.csv"), "-o", str(out)]) == 0
    with out.open() as f:
        return list(csv.reader(f))


def test_dmpnn_with_features_predicts_what_the_model_computes(tmp_path: Path) -> None:
    run_dir = _train(tmp_path, DMPNN, BOTH)
    info = json.loads((run_dir / "run_info.json").read_text())["info"]
    run = load_trained(run_dir)
    model = run.model
    n = len(info["feature_names"])
    assert n == model.feature_size == len(Chem.Descriptors.descList) + 1
    assert model.ffn[1].in_features == 12 + n  # the FFN reads readout and features
    np.testing.assert_allclose(model.feature_mean.numpy(), info["feature_mean"], rtol=1e-6)
    assert info["feature_clip"] == model.feature_clip == 10.0  # dataset.feature_clip's default
    assert 0 < info["feature_mean"][-1] < 4  # the column's values are 0 … 4
    rows = _predict(tmp_path, run_dir, "smiles,own,id\nCCO,2.5,a\nc1ccccc1O,-1,b\n")
    assert rows[0] == ["smiles", "own", "id", "y", "error"]
    got = torch.tensor([float(r[3]) for r in rows[1:]])
    expected = []
    for smiles, value in (("CCO", 2.5), ("c1ccccc1O", -1.0)):
        mol = Chem.MolFromSmiles(smiles)
        raw = np.concatenate([molecule_features(mol, ["rdkit2d"]), [value]]).astype(np.float32)
        z = (torch.from_numpy(raw) - model.feature_mean) / model.feature_std
        z = torch.where(torch.isfinite(z), z, torch.zeros_like(z)).clamp(-10, 10)
        graph = molecule_inputs([smiles])[0][0]  # the graph without features: encode only
        with torch.no_grad():
            h = model.readout(model.collate([graph]))
            y = model.ffn(torch.cat([h, z[None]], 1)) * model.target_std + model.target_mean
        expected.append(float(y))
    assert torch.allclose(got, torch.tensor(expected), atol=1e-5)


def test_weave_with_features_trains_and_predicts(tmp_path: Path) -> None:
    run_dir = _train(tmp_path, WEAVE, ["dataset.features=[morgan]"])
    model = load_trained(run_dir).model
    assert model.head[1].in_features == 6 + 2048  # pooled readout (graph_size) + Morgan counts
    rows = _predict(tmp_path, run_dir, "smiles\nCCO\nCCCCO\n")
    a, b = float(rows[1][1]), float(rows[2][1])
    graphs = [g for g, _ in molecule_inputs(["CCO", "CCCCO"], extra=(["morgan"], []))]
    with torch.no_grad():
        expected = model.predict(model.collate(graphs)).flatten().tolist()
    assert [a, b] == pytest.approx(expected, abs=1e-5) and a != b


def test_no_features_leave_the_model_as_it_was(tmp_path: Path) -> None:
    model = load_trained(_train(tmp_path, DMPNN, [])).model
    assert model.feature_size == 0 and model.ffn[1].in_features == 12
    assert not any("feature" in k for k in model.state_dict())
    with pytest.raises(ValueError, match="trained with 3 molecule features"):
        model.feature_size = 3
        join_features(model, torch.zeros(1, 12), None)


def test_predict_needs_the_feature_columns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = _train(tmp_path, DMPNN, ["dataset.feature_columns=[own]"])
    rows = _predict(tmp_path, run_dir, "smiles,own\nCCO,1\nCCN,x\nCCCl,\n")
    src = tmp_path / "in.csv"
    assert rows[1][2] and not rows[1][3]
    assert rows[2][2:] == ["", f"{src}:3, column 'own': expected a finite number "
                               "(dataset.feature_columns), got 'x'"]  # fmt: skip
    assert rows[3][3].endswith("got ''")
    (tmp_path / "none.csv").write_text("smiles,id\nCCO,a\n")
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(["predict", str(run_dir), str(tmp_path / "none.csv")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'none.csv'}: no column 'own' in the header" in err
    assert err.count("\n") == 1


def test_standardised_features_are_clipped_and_missing_ones_take_the_mean() -> None:
    module = torch.nn.Module()
    assert init_features(module, [0.0, 1.0, 2.0], [1.0, 2.0, 4.0]) == 3
    raw = torch.tensor([[500.0, float("nan"), -2.0]])
    module.feature_clip = 10.0
    assert join_features(module, torch.ones(1, 1), raw).tolist() == [[1.0, 10.0, 0.0, -1.0]]
    module.feature_clip = None  # dataset.feature_clip=null
    assert join_features(module, torch.ones(1, 1), raw).tolist() == [[1.0, 500.0, 0.0, -1.0]]


def test_a_far_finite_feature_is_clipped_not_taken_as_missing() -> None:
    # (1e37 - 0) / 0.01 overflows float32 to inf: it was set to 0 (the mean) like a NaN
    module = torch.nn.Module()
    init_features(module, [0.0], [0.01])
    module.feature_clip = 10.0
    raw = torch.tensor([[1e37], [-1e37], [float("inf")]])
    assert join_features(module, torch.zeros(3, 1), raw)[:, 1].tolist() == [10.0, -10.0, 0.0]


def test_predict_refuses_a_feature_column_named_twice(tmp_path: Path) -> None:
    # training refuses such a header; predict took the last f1's cells without a word
    from types import SimpleNamespace

    from foldexp.analysis.predict_inputs import check_columns

    run = SimpleNamespace(config={"dataset": {"smiles_column": "smiles", "feature_columns": ["f"]}})
    check_columns(run, ["f", "id", "id"], "in.csv")  # a column the run does not read: fine
    with pytest.raises(ValueError, match=r"^in.csv: column 'f' is named twice in the header"):
        check_columns(run, ["f", "g", "f"], "in.csv")
