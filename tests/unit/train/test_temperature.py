"""``model.temperature``: temperature scaling of molecule classification, fitted on dev.

A synthetic overconfident classifier's temperature comes out near its true factor and lowers
the dev NLL and ECE; the ECE against a hand computation; a run saves the temperatures in
``best.pt`` and ``results.json`` and ``predict`` applies them."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

from foldexp.analysis.predict import run_predict
from foldexp.experiments.molecule_data import molecule_inputs
from foldexp.models.dmpnn import DMPNNModel
from foldexp.models.temperature import (
    expected_calibration_error,
    fit_temperature,
    masked_nll,
    temperature_metrics,
)
from foldexp.train.app import compose_config
from foldexp.train.loop import run_train
from foldexp.train.runs import load_trained

SMILES = [
    "CCO", "CCCC", "c1ccccc1", "CC(=O)O", "CCN", "OCCO", "c1ccncc1", "CC(C)O", "ClCCl",
    "CCOCC", "C1CCCCC1", "c1ccc2ccccc2c1", "CC#N", "CCCl", "O=C1CCCCC1", "Cc1ccccc1",
    "CS(C)=O", "NCCO", "FC(F)F", "C=CC", "Oc1ccccc1", "CCCCO", "C1CCOC1", "c1ccoc1",
]  # fmt: skip


def _overconfident(n: int = 4000) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Labels drawn from sigmoid(t); the logits given are 4 t (task 0) and 2 t (task 1)."""
    g = torch.Generator().manual_seed(0)
    true = torch.randn(n, 2, generator=g) * 1.5
    labels = (torch.rand(n, 2, generator=g) < torch.sigmoid(true)).float()
    labelled = torch.ones(n, 2, dtype=torch.bool)
    labelled[::5, 1] = False  # a missing label is left out of the fit
    return true * torch.tensor([4.0, 2.0]), labels, labelled


def test_fitted_temperature_lowers_nll_and_ece() -> None:
    logits, labels, labelled = _overconfident()
    t = fit_temperature(logits, labels, labelled)
    assert t.tolist() == pytest.approx([4.0, 2.0], rel=0.1)
    before = masked_nll(logits, labels, labelled, torch.ones(2)).item()
    after = masked_nll(logits, labels, labelled, t).item()
    assert after < before - 0.05
    m = temperature_metrics(logits, labels, labelled, t, ["a", "b"])
    assert m["ece"] < 0.03 < m["ece_uncalibrated"]
    assert m["ece"] == pytest.approx((m["ece_a"] + m["ece_b"]) / 2)
    shared = fit_temperature(logits, labels, labelled, shared=True)
    assert shared[0] == shared[1] and 2.0 < shared[0] < 4.0
    # a task without a labelled entry keeps T = 1
    none = torch.zeros_like(labelled)
    none[:, 0] = True
    assert fit_temperature(logits, labels, none)[1].item() == 1.0


def test_ece_by_hand() -> None:
    p = torch.tensor([0.05, 0.15, 0.12, 0.95, 0.91, 0.55])
    y = torch.tensor([0.0, 1.0, 0.0, 1.0, 0.0, 1.0])
    # bins: [0, .1): {0.05 | 0}, [.1, .2): {0.15, 0.12 | 1, 0}, [.5, .6): {0.55 | 1},
    # [.9, 1]: {0.95, 0.91 | 1, 0}
    expected = (1 * 0.05 + 2 * abs(0.5 - 0.135) + 1 * 0.45 + 2 * abs(0.5 - 0.93)) / 6
    assert expected_calibration_error(p, y) == pytest.approx(expected, rel=1e-6)


def test_classifier_without_the_key_has_no_temperature() -> None:
    """A run trained before model.temperature existed loads as it was (no buffer)."""
    model = DMPNNModel(4, 7, task="classification", hidden_size=8)
    assert not hasattr(model, "temperature") and "temperature" not in model.state_dict()
    assert DMPNNModel(4, 7, task="classification", temperature="per_task").temperature.shape == (1,)
    assert not hasattr(DMPNNModel(4, 7, temperature="per_task"), "temperature")  # regression


def test_run_fits_temperature_on_dev_and_predict_applies_it(tmp_path: Path) -> None:
    path = tmp_path / "mols.csv"
    rows = [f"{s},{int('O' in s or 'o' in s)}" for s in SMILES * 2]
    path.write_text("smiles,oxygen\n" + "\n".join(rows) + "\n")
    args = ["experiment=molecules_csv", "model=dmpnn", f"dataset.path={path}",
            "dataset.targets=[oxygen]", "dataset.task=classification", "model.hidden_size=16",
            "trainer.epochs=4", "trainer.plots=false", "trainer.progress=false",
            f"paths.cache_dir={tmp_path / 'cache'}"]  # fmt: skip
    results = run_train(compose_config(args, output_dir=tmp_path / "run"))
    (t,) = results["temperature"]
    assert t > 0 and t != 1.0
    assert 0 <= results["test_ece"] <= 1 and 0 <= results["test_ece_uncalibrated"] <= 1
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert saved["temperature"] == [t]
    # during training T = 1: no ECE a epoch (it would equal the uncalibrated one)
    header = (tmp_path / "run" / "metrics.csv").read_text().splitlines()[0]
    assert "dev_roc_auc" in header and "ece" not in header
    run = load_trained(tmp_path / "run")
    assert run.model.temperature.item() == pytest.approx(t)
    out = tmp_path / "pred.csv"
    run_predict(tmp_path / "run", str(path), out)
    with out.open() as f:
        got = [float(r["oxygen_probability"]) for r in csv.DictReader(f)]
    graphs = [g for g, _ in molecule_inputs(SMILES * 2)]
    with torch.no_grad():
        logits = run.model._outputs(run.model.collate(graphs))[:, 0]
    assert got == pytest.approx(torch.sigmoid(logits / t).tolist(), rel=1e-5)
    assert got != pytest.approx(torch.sigmoid(logits).tolist(), rel=1e-3)


def test_temperature_key_is_checked_at_compose_time() -> None:
    base = ["experiment=molecules_csv", "model=dmpnn", "dataset.path=x.csv", "dataset.targets=[y]"]
    with pytest.raises(Exception, match=r"temperature.*hot"):
        compose_config([*base, "model.temperature=hot"])
    assert compose_config(base).model.temperature == "per_task"
