"""``model.uncertainty=mve``: the mean-variance head's loss, its calibration on dev (saved in
``best.pt``, applied by ``predict``), and the coverage and miscalibration metrics, checked
against values computed here by hand."""

from __future__ import annotations

import csv
import json
import logging
import math
from pathlib import Path

import pytest
import torch

from foldexp.analysis.predict import run_predict
from foldexp.experiments.molecule_data import molecule_inputs
from foldexp.models.dmpnn import DMPNNModel
from foldexp.models.uncertainty import (
    Z90,
    calibrate_scale,
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
    s = interval_scale(z)  # |z| uniform on [0, 3]: rank ⌈1002 · 0.9⌉ = 902 is 451 · 0.006
    assert s == pytest.approx(2.706 / Z90, rel=1e-6)
    assert coverage(z, s) == pytest.approx(903 / 1001)  # rank 902 and its tie, -2.706
    assert coverage(z) == pytest.approx(Z90 / 3, abs=2e-3)
    gaussian = torch.distributions.Normal(0.0, 1.0).icdf(torch.linspace(0.0005, 0.9995, 2000))
    assert miscalibration_area(gaussian) < 0.005  # calibrated σ
    assert miscalibration_area(gaussian * 4) > 0.2  # σ four times too small
    assert math.isnan(coverage(torch.zeros(0)))


def test_interval_scale_is_the_conformal_order_statistic(caplog: pytest.LogCaptureFixture) -> None:
    # n = 10: rank ⌈11 · 0.9⌉ = 10, the largest |z| (1.0); np.quantile's 0.9 would be 0.91.
    z = torch.tensor([0.3, -0.1, 0.5, -1.0, 0.2, 0.7, -0.4, 0.9, -0.6, 0.8])
    assert interval_scale(z) == pytest.approx(1.0 / Z90, rel=1e-12)
    assert torch.quantile(z.abs(), 0.9).item() == pytest.approx(0.91)
    # n = 19 (|z| = 1 … 19): rank 18 → 18; np.quantile's 0.9 would be 17.2. Coverage ≥ 0.9.
    z = torch.arange(1.0, 20.0) * torch.tensor([1.0, -1.0]).repeat(10)[:19]
    s = interval_scale(z)
    assert s == pytest.approx(18.0 / Z90, rel=1e-12)
    assert coverage(z, s) == pytest.approx(18 / 19)
    # 20 · 0.7 is 14.000000000000002 in floating point: the rank is still 14, not 15.
    assert interval_scale(z, level=0.7) == pytest.approx(14.0 / _half_width(0.7), rel=1e-9)
    assert "largest" not in caplog.text
    # n = 5: rank ⌈6 · 0.9⌉ = 6 > 5: the largest |z|, said in a log line.
    with caplog.at_level(logging.WARNING, logger="foldexp.models.uncertainty"):
        assert interval_scale(torch.tensor([0.5, -2.0, 1.0, 0.1, 0.3])) == pytest.approx(2.0 / Z90)
    assert "5 dev residuals are too few" in caplog.text and "rank 6 > 5" in caplog.text
    assert interval_scale(torch.zeros(0)) == 1.0


def _half_width(level: float) -> float:
    return math.sqrt(2) * torch.erfinv(torch.tensor(level, dtype=torch.float64)).item()


def test_calibrate_scale_per_target_ignores_missing_labels() -> None:
    # Target 0: 10 labelled residuals (rank 10 → |z| = 5 / 2); target 1: 9 of 12 labelled, the
    # three missing ones are the largest and would change the rank-9 statistic (1.0) were they read.
    r0 = torch.tensor([1.0, -2, 3, -4, 5, 0.5, -1.5, 2.5, -3.5, 4.5, 9.0, 9.0])
    r1 = torch.tensor([0.1, -0.2, 0.3, -0.4, 0.5, -0.6, 0.7, -0.8, 1.0, 50.0, 60.0, 70.0])
    labelled = torch.ones(12, 2, dtype=torch.bool)
    labelled[10:, 0] = labelled[9:, 1] = False
    out = {"residual": torch.stack([r0, r1], 1), "sigma": torch.full((12, 2), 2.0)}

    class Stub(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("calibration_scale", torch.ones(2))

        def collate(self, rows: list[int]) -> list[int]:
            return rows

        def forward(self, rows: list[int]) -> dict[str, torch.Tensor]:
            return {"residual": out["residual"][rows], "sigma": out["sigma"][rows],
                    "labelled": labelled[rows]}  # fmt: skip

    model = Stub()
    got = calibrate_scale(model, list(range(12)), batch_size=5)["calibration_scale"]
    assert got == pytest.approx([2.5 / Z90, 0.5 / Z90], rel=1e-6)
    assert model.calibration_scale.tolist() == pytest.approx(got, rel=1e-6)


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
