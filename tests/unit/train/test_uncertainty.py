"""``model.uncertainty=mve``: the mean-variance head's loss, its calibration on dev (saved in
``best.pt``, applied by ``predict``), and the coverage and miscalibration metrics, checked
against values computed here by hand."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import torch

from foldexp.analysis.predict import run_predict
from foldexp.experiments.molecule_data import molecule_inputs
from foldexp.models.dmpnn import DMPNNModel
from foldexp.models.uncertainty import (
    Z90,
    coverage,
    gaussian_nll,
    interval_scale,
    miscalibration_area,
    mve_split,
)
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


def test_gaussian_nll_matches_torch() -> None:
    torch.manual_seed(0)
    mean, var, y = torch.randn(6, 2), torch.rand(6, 2) + 0.1, torch.randn(6, 2)
    mask = torch.ones(6, 2, dtype=torch.bool)
    mask[0, 1] = mask[3, 0] = False
    expected = torch.nn.GaussianNLLLoss(reduction="none")(mean, y, var)[mask].mean()
    assert gaussian_nll(mean, var, y, mask).item() == pytest.approx(expected.item(), rel=1e-6)
    raw = torch.tensor([[1.0, 2.0, 0.0, -3.0]])
    mu, v = mve_split(raw, 2)
    assert mu.tolist() == [[1.0, 2.0]]
    assert v[0].tolist() == pytest.approx([math.log(2) + 1e-6, math.log1p(math.exp(-3)) + 1e-6])


def test_calibration_scale_coverage_and_miscalibration() -> None:
    z = torch.linspace(-3, 3, 1001)
    s = interval_scale(z)  # |z| spread uniformly on [0, 3]: q0.9 = 2.7
    assert s == pytest.approx(2.7 / Z90, rel=1e-3)
    assert coverage(z, s) == pytest.approx(0.9, abs=2e-3)
    assert coverage(z) == pytest.approx(Z90 / 3, abs=2e-3)
    gaussian = torch.distributions.Normal(0.0, 1.0).icdf(torch.linspace(0.0005, 0.9995, 2000))
    assert miscalibration_area(gaussian) < 0.005  # calibrated σ
    assert miscalibration_area(gaussian * 4) > 0.2  # σ four times too small
    assert math.isnan(coverage(torch.zeros(0)))


def test_mve_model_predicts_value_and_std() -> None:
    torch.manual_seed(0)
    stats = {"target_mean": [1.0, 2.0], "target_std": [2.0, 3.0], "target_names": ["a", "b"]}
    model = DMPNNModel(4, 7, num_targets=2, hidden_size=8, uncertainty="mve", **stats)
    assert model.prediction_columns() == ["a", "a_std", "b", "b_std"]
    assert model.ffn[-1].out_features == 4
    z = torch.tensor([[0.5, -1.0, 0.0, 1.0]])
    model.calibration_scale.copy_(torch.tensor([2.0, 1.0]))
    model._outputs = lambda batch: z  # type: ignore[method-assign]
    got = model.predict(None)[0].tolist()
    sp = torch.nn.functional.softplus(torch.tensor([0.0, 1.0])) + 1e-6
    expected = [0.5 * 2 + 1, sp[0].sqrt() * 2 * 2, -1.0 * 3 + 2, sp[1].sqrt() * 3]
    assert got == pytest.approx([float(e) for e in expected], rel=1e-5)
    with pytest.raises(ValueError, match="model.uncertainty=mve .* task is classification"):
        DMPNNModel(4, 7, task="classification", uncertainty="mve")


def test_mve_run_calibrates_on_dev_and_predict_applies_it(tmp_path: Path) -> None:
    path = _csv(tmp_path)
    args = ["experiment=molecules_csv", "model=dmpnn", f"dataset.path={path}",
            "dataset.targets=[y]", "model.uncertainty=mve", "model.hidden_size=16",
            "trainer.epochs=3", "trainer.plots=false", "trainer.progress=false",
            f"paths.cache_dir={tmp_path / 'cache'}"]  # fmt: skip
    results = run_train(compose_config(args, output_dir=tmp_path / "run"))
    for key in ("test_coverage90", "test_coverage90_uncalibrated", "test_miscalibration_area"):
        assert 0.0 <= results[key] <= 1.0, key
    (scale,) = results["calibration_scale"]
    assert scale > 0 and scale != 1.0
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert saved["calibration_scale"] == [scale]
    run = load_trained(tmp_path / "run")  # the scale is in best.pt
    assert run.model.calibration_scale.item() == pytest.approx(scale)
    out = tmp_path / "pred.csv"
    run_predict(tmp_path / "run", str(path), out)
    with out.open() as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0])[:5] == ["smiles", "id", "input_y", "y", "y_std"]
    # the std written is the model's σ times the dev scale, in the target's units
    graphs = [g for g, _ in molecule_inputs(SMILES)]
    with torch.no_grad():
        _, var = mve_split(run.model._outputs(run.model.collate(graphs)), 1)
    sigma = (var.sqrt() * run.model.target_std)[:, 0] * scale
    assert [float(r["y_std"]) for r in rows] == pytest.approx(sigma.tolist(), rel=1e-5)
    assert [float(r["y"]) for r in rows] != [float(r["y_std"]) for r in rows]


def test_uncertainty_key_is_checked_at_compose_time() -> None:
    base = ["experiment=molecules_csv", "model=dmpnn", "dataset.path=x.csv", "dataset.targets=[y]"]
    with pytest.raises(Exception, match=r"uncertainty.*bayes"):
        compose_config([*base, "model.uncertainty=bayes"])
    assert compose_config([*base, "model.uncertainty=mve"]).model.uncertainty == "mve"
