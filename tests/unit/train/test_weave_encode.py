"""The weave model's ``encode`` (its pooled readout, the read-out MLP's input): the same
parameter names in ``best.pt`` as before it existed, ``foldexp fingerprint`` on weave runs,
and ``model.init_from`` / ``model.freeze=encoder`` for weave."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest
import torch

from foldexp.analysis import fingerprint_arrays, predict
from foldexp.analysis.predict import run_predict
from foldexp.cli import main
from foldexp.experiments.molecule_data import molecule_inputs
from foldexp.models.weave import WeaveModel
from foldexp.train.app import compose_config
from foldexp.train.loop import run_train
from foldexp.train.runs import load_trained

SMILES = [
    "CCO", "CCCC", "c1ccccc1", "CC(=O)O", "CCN", "OCCO", "c1ccncc1", "CC(C)O", "ClCCl",
    "CCOCC", "C1CCCCC1", "c1ccc2ccccc2c1", "CC#N", "CCCl", "O=C1CCCCC1", "Cc1ccccc1",
]  # fmt: skip
SIZES = ["model.atom_size=4", "model.pair_size=4", "model.graph_size=5", "model.mlp_size=3"]
#: best.pt's parameters of WeaveModel(10, 7, layers=2, sizes 4, 4, 5, 3) as the code wrote them
#: before ``encode`` existed (commit b9eaa50): a trained run must still load.
KEYS = [
    ("compiler.layers.0", (4, 10)), ("compiler.layers.1", (4, 7)), ("compiler.layers.3", (4, 8)),
    ("compiler.layers.5", (4, 20)), ("compiler.layers.7", (4, 7)), ("compiler.layers.9", (4, 8)),
    ("compiler.layers.10", (4, 4)), ("compiler.layers.11", (4, 4)),
    ("compiler.layers.13", (4, 8)), ("compiler.layers.14", (5, 4)),
    ("compiler.layers.15", (3, 5)), ("compiler.layers.16", (1, 3)),
]  # fmt: skip


def test_parameter_names_are_those_of_earlier_runs() -> None:
    model = WeaveModel(10, 7, 1, layers=2, atom_size=4, pair_size=4, graph_size=5, mlp_size=3)
    expected = {"target_mean": (1,), "target_std": (1,)}
    for name, shape in KEYS:
        expected[f"{name}.linear.weight"] = shape
        expected[f"{name}.linear.bias"] = shape[:1]
    assert {k: tuple(v.shape) for k, v in model.state_dict().items()} == expected
    # the encoder: every layer but the read-out MLP's two
    assert model._encoder.prefixes == tuple(name for name, _ in KEYS[:-2])


def _train(tmp_path: Path, name: str, column: str, *extra: str) -> Path:
    path = tmp_path / f"{column}.csv"
    rows = [f"m{k},{s},{(len(s) * (3 if column == 'a' else 7)) % 5}" for k, s in enumerate(SMILES)]
    path.write_text(f"id,smiles,{column}\n" + "\n".join(rows) + "\n")
    args = ["experiment=molecules_csv", f"dataset.path={path}", f"dataset.targets=[{column}]",
            "trainer.epochs=2", "trainer.plots=false", "trainer.progress=false",
            f"paths.cache_dir={tmp_path / 'cache'}", *SIZES, *extra]  # fmt: skip
    run_train(compose_config(args, output_dir=tmp_path / name))
    return tmp_path / name


def _csv(path: Path) -> list[list[str]]:
    with path.open() as f:
        return list(csv.reader(f))


def test_weave_fingerprint_is_the_read_out_mlps_input(tmp_path: Path) -> None:
    run_dir = _train(tmp_path, "run", "a")
    (tmp_path / "in.csv").write_text("id,smiles\nx,CCO\ny,C1CC\nz,c1ccccc1O\n")
    out = tmp_path / "fp.csv"
    assert main(["fingerprint", str(run_dir), str(tmp_path / "in.csv"), "-o", str(out)]) == 0
    rows = _csv(out)
    assert rows[0] == ["smiles", "id", *[f"fp_{k}" for k in range(5)], "error"]
    assert rows[2][2:7] == [""] * 5 and "C1CC" in rows[2][7]  # unreadable: its row's error
    got = torch.tensor([[float(v) for v in rows[k][2:7]] for k in (1, 3)])
    model = load_trained(run_dir).model
    graphs = [g for g, _ in molecule_inputs(["CCO", "c1ccccc1O"])]
    with torch.no_grad():
        batch = model.collate(graphs)
        assert torch.allclose(got, model.encode(batch), atol=1e-6)
        # by hand: the read-out MLP (FC 3, ReLU; FC 1) over the fingerprint is the prediction
        mlp, last = (model.compiler.layers[i].linear for i in (15, 16))
        y = last(torch.relu(mlp(got))) * model.target_std + model.target_mean
        assert torch.allclose(y, model.predict(batch), atol=1e-5)
    assert not torch.allclose(got[0], got[1])


def test_weave_fingerprint_joins_the_molecule_features(tmp_path: Path) -> None:
    (tmp_path / "own.csv").write_text(
        "smiles,a,own\n" + "\n".join(f"{s},{len(s) % 5},{k}" for k, s in enumerate(SMILES))
    )
    run_dir = _train(tmp_path, "run", "a", f"dataset.path={tmp_path / 'own.csv'}",
                     "dataset.feature_columns=[own]")  # fmt: skip
    model = load_trained(run_dir).model
    assert model.encode_size == 5 + 1
    (tmp_path / "in.csv").write_text("smiles,own\nCCO,2.5\nCCCCO,-40\n")
    rows = run_predict(run_dir, str(tmp_path / "in.csv"), fingerprint=True)
    own = torch.tensor([float(r["fp_5"]) for r in rows])
    mean, std = float(model.feature_mean[0]), float(model.feature_std[0])
    expected = torch.tensor([(2.5 - mean) / std, max((-40 - mean) / std, -10.0)])  # clip ±10
    assert torch.allclose(own, expected, atol=1e-5) and float(own[1]) == -10.0


def test_frozen_weave_encoder_is_the_source_runs(tmp_path: Path) -> None:
    source = _train(tmp_path, "source", "a")
    frozen = _train(tmp_path, "frozen", "b", f"model.init_from={source}", "model.freeze=encoder")
    free = _train(tmp_path, "free", "b", f"model.init_from={source}")
    s, f = load_trained(source).model.state_dict(), load_trained(frozen).model.state_dict()
    free_state = load_trained(free).model.state_dict()
    for name, _ in KEYS[:-2]:
        for p in (f"{name}.linear.weight", f"{name}.linear.bias"):
            assert torch.equal(f[p], s[p]), p  # frozen: the source's, exactly
            assert not torch.equal(free_state[p], s[p]), p  # not frozen: trained on
    for name, _ in KEYS[-2:]:  # the read-out MLP is this run's, trained
        assert not torch.equal(f[f"{name}.linear.weight"], s[f"{name}.linear.weight"]), name
    rows = run_predict(frozen, str(tmp_path / "b.csv"))
    assert len(rows) == len(SMILES) and all(r["error"] == "" and r["b"] != "" for r in rows)


def test_weave_init_from_refuses_another_depth_or_width(tmp_path: Path) -> None:
    source = _train(tmp_path, "source", "a")
    with pytest.raises(ValueError, match=r"model\.layers=2, this one 3"):
        _train(tmp_path, "deep", "b", f"model.init_from={source}", "model.layers=3")
    with pytest.raises(
        ValueError, match=r"is \[4, \d+\] there, \[6, \d+\] here \(model\.atom_size"
    ):
        _train(tmp_path, "wide", "b", f"model.init_from={source}", "model.atom_size=6")


def test_fingerprint_keeps_no_trace_of_earlier_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = _train(tmp_path, "run", "a")
    (tmp_path / "in.csv").write_text("smiles\n" + "\n".join(SMILES[:7]) + "\n")
    monkeypatch.setattr(predict, "CHUNK_INPUTS", 2)
    runs, kept, load, take = [], [], predict.load_members, fingerprint_arrays.NpyRows.take

    def loaded(*args: Any) -> Any:
        runs.extend(load(*args))
        return runs

    def spy(self: Any, *args: Any) -> Any:  # the weave compiler's traces as a chunk is written
        kept.append(len(runs[0].model.compiler.trace_cache))
        return take(self, *args)

    monkeypatch.setattr(predict, "load_members", loaded)
    monkeypatch.setattr(fingerprint_arrays.NpyRows, "take", spy)
    predict.stream_predict(run_dir, str(tmp_path / "in.csv"), tmp_path / "fp.npy", fingerprint=True)
    assert kept == [2, 2, 2, 1]  # this chunk's molecules only, never the 7 of the file
    assert len(runs[0].model.compiler.trace_cache) == 0
