"""A prediction's spread: ``foldexp predict --mc-dropout N`` and ``foldexp predict SWEEP_DIR``
(an ensemble), checked against passes and members computed here by hand."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

from foldexp.analysis.ensemble import run_ensemble
from foldexp.analysis.predict import run_predict
from foldexp.analysis.spread import combine, enable_dropout, spread_columns
from foldexp.cli import main
from foldexp.experiments.molecule_data import molecule_inputs
from foldexp.train.app import compose_config
from foldexp.train.loop import run_train
from foldexp.train.runs import load_trained

SMILES = [
    "CCO", "CCCC", "c1ccccc1", "CC(=O)O", "CCN", "OCCO", "c1ccncc1", "CC(C)O", "ClCCl",
    "CCOCC", "C1CCCCC1", "c1ccc2ccccc2c1", "CC#N", "CCCl", "O=C1CCCCC1", "Cc1ccccc1",
    "CS(C)=O", "NCCO", "FC(F)F", "C=CC", "Oc1ccccc1", "CCCCO", "C1CCOC1", "c1ccoc1",
]  # fmt: skip


def _csv(tmp_path: Path) -> Path:
    path = tmp_path / "mols.csv"
    rows = [f"m{k},{s},{0.3 * len(s) - 1:.2f}" for k, s in enumerate(SMILES)]
    path.write_text("id,smiles,y\n" + "\n".join(rows) + "\n")
    return path


def _train(tmp_path: Path, out: Path, *extra: str) -> Path:
    args = ["experiment=molecules_csv", "model=dmpnn", f"dataset.path={_csv(tmp_path)}",
            "dataset.targets=[y]", "model.hidden_size=16", "trainer.epochs=2",
            "trainer.plots=false", "trainer.progress=false",
            f"paths.cache_dir={tmp_path / 'cache'}", *extra]  # fmt: skip
    run_train(compose_config(args, output_dir=out))
    return out


def _column(path: Path, name: str) -> list[float]:
    with path.open() as f:
        return [float(row[name]) for row in csv.DictReader(f)]


def test_combine_by_hand() -> None:
    passes = torch.tensor([[[1.0], [4.0]], [[3.0], [4.0]], [[5.0], [7.0]]])  # (3 passes, 2, 1)
    assert spread_columns(["y"]) == ["y", "y_std"]
    got = combine(["y"], passes)
    assert got[:, 0].tolist() == pytest.approx([3.0, 5.0])
    assert got[:, 1].tolist() == pytest.approx([(8 / 3) ** 0.5, 2**0.5])  # population std
    # members with their own σ: sqrt(mean σ² + var of the means)
    own = torch.tensor([[[1.0, 0.5]], [[3.0, 1.5]]])  # 2 members, 1 input, (y, y_std)
    assert spread_columns(["y", "y_std"]) == ["y", "y_std"]
    total = combine(["y", "y_std"], own)[0].tolist()
    assert total == pytest.approx([2.0, ((0.25 + 2.25) / 2 + 1.0) ** 0.5])


def test_mc_dropout_mean_of_seeded_passes(tmp_path: Path) -> None:
    run_dir = _train(tmp_path, tmp_path / "run", "model.dropout=0.3")
    out_a, out_b = tmp_path / "a.csv", tmp_path / "b.csv"
    run_predict(run_dir, str(_csv(tmp_path)), out_a, mc_dropout=5, seed=3)
    run_predict(run_dir, str(_csv(tmp_path)), out_b, mc_dropout=5, seed=3)
    assert out_a.read_text() == out_b.read_text()  # seeded: identical
    std = _column(out_a, "y_std")
    assert min(std) > 0
    run = load_trained(run_dir)  # by hand: the same seed, five passes with dropout on
    enable_dropout(run.model, "run")
    torch.manual_seed(3)
    batch = run.model.collate([g for g, _ in molecule_inputs(SMILES)])
    with torch.no_grad():
        passes = torch.stack([run.model.predict(batch)[:, 0] for _ in range(5)])
    assert _column(out_a, "y") == pytest.approx(passes.mean(0).tolist(), rel=1e-5)
    assert std == pytest.approx(passes.std(0, correction=0).tolist(), rel=1e-4)
    other = tmp_path / "c.csv"
    run_predict(run_dir, str(_csv(tmp_path)), other, mc_dropout=5, seed=4)
    assert _column(other, "y") != _column(out_a, "y")


def test_mc_dropout_refusals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = _train(tmp_path, tmp_path / "run")  # model.dropout=0
    with pytest.raises(ValueError, match=r"MC dropout needs dropout > 0.*model.dropout=0"):
        run_predict(run_dir, str(_csv(tmp_path)), tmp_path / "p.csv", mc_dropout=4)
    for bad in ("1", "1001", "x"):
        with pytest.raises(SystemExit) as exit_:
            main(["predict", str(run_dir), str(_csv(tmp_path)), "--mc-dropout", bad])
        assert exit_.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert "--mc-dropout" in err and ("expected 2 <= value <= 1000" in err or "x" in err)


def test_sweep_folder_predicts_as_an_ensemble(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    for seed in (0, 1):
        _train(tmp_path, sweep / str(seed), f"seed={seed}", "model.uncertainty=mve")
    members = []
    for seed in (0, 1):
        out = tmp_path / f"member{seed}.csv"
        run_predict(sweep / str(seed), str(_csv(tmp_path)), out)
        members.append((_column(out, "y"), _column(out, "y_std")))
    out = tmp_path / "ensemble.csv"
    run_predict(sweep, str(_csv(tmp_path)), out)
    (m0, s0), (m1, s1) = members
    mean = [(a + b) / 2 for a, b in zip(m0, m1, strict=True)]
    total = [
        ((x * x + y * y) / 2 + ((a - b) / 2) ** 2) ** 0.5
        for a, b, x, y in zip(m0, m1, s0, s1, strict=True)
    ]
    assert _column(out, "y") == pytest.approx(mean, rel=1e-5)
    assert _column(out, "y_std") == pytest.approx(total, rel=1e-5)
    assert m0 != m1


def test_sweep_members_must_agree(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    _train(tmp_path, sweep / "a")
    _train(tmp_path, sweep / "b", "model.uncertainty=mve")
    with pytest.raises(ValueError, match=r"differ in their prediction columns"):
        run_predict(sweep, str(_csv(tmp_path)), tmp_path / "p.csv")


def test_ensemble_command_writes_the_spread_of_a_molecule_sweep(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    for seed in (0, 1):  # dataset.seed=0: the same split, so the same test molecules
        _train(tmp_path, sweep / str(seed), f"seed={seed}", "dataset.seed=0")
    result = run_ensemble([sweep])
    for k, member in enumerate(result["members"]):
        run = json.loads((sweep / str(k) / "results.json").read_text())
        assert member["rmse"] == pytest.approx(run["test_rmse"], rel=1e-5)
    table = sweep / "ensemble_predictions.csv"
    with table.open() as f:
        rows = list(csv.DictReader(f))
    smiles = tmp_path / "test_smiles.txt"
    smiles.write_text("\n".join(r["smiles"] for r in rows) + "\n")
    members = []
    for k in (0, 1):
        run_predict(sweep / str(k), str(smiles), tmp_path / f"m{k}.csv")
        members.append(_column(tmp_path / f"m{k}.csv", "y"))
    mean = [(a + b) / 2 for a, b in zip(*members, strict=True)]
    assert [float(r["y"]) for r in rows] == pytest.approx(mean, rel=1e-5)
    spread = [abs(a - b) / 2 for a, b in zip(*members, strict=True)]
    assert [float(r["y_std"]) for r in rows] == pytest.approx(spread, rel=1e-4, abs=1e-6)
    errors = [(m - float(r["label_y"])) ** 2 for m, r in zip(mean, rows, strict=True)]
    assert result["ensemble"]["rmse"] == pytest.approx((sum(errors) / len(errors)) ** 0.5, rel=1e-5)
    assert 0 <= result["ensemble"]["coverage90"] <= 1
    assert (sweep / "ensemble.md").read_text().count("| seed ") == 2
