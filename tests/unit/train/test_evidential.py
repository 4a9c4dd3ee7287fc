"""``model.uncertainty=evidential``: the NIG loss against a hand computation and the Student-t
it is the negative log-density of, the predicted (total) standard deviation, a run calibrated
on dev whose predict writes ``<target>_std``, and the refusals."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from foldexp.analysis.predict import run_predict
from foldexp.config.errors import ConfigError
from foldexp.experiments.molecule_data import molecule_inputs
from foldexp.models.dmpnn import DMPNNModel
from foldexp.models.evidential import evidential_loss, evidential_split, evidential_variance
from foldexp.train.app import compose_config
from foldexp.train.loop import run_train
from foldexp.train.runs import load_trained

SMILES = [
    "CCO", "CCCC", "c1ccccc1", "CC(=O)O", "CCN", "OCCO", "c1ccncc1", "CC(C)O", "ClCCl",
    "CCOCC", "C1CCCCC1", "c1ccc2ccccc2c1", "CC#N", "CCCl", "O=C1CCCCC1", "Cc1ccccc1",
    "CS(C)=O", "NCCO", "FC(F)F", "C=CC", "Oc1ccccc1", "CCCCO", "C1CCOC1", "c1ccoc1",
]  # fmt: skip


def test_evidential_loss_equals_a_hand_computation() -> None:
    gamma, nu, alpha, beta, y, lam = 0.5, 2.0, 3.0, 1.5, 1.2, 0.3
    r = y - gamma
    omega = 2 * beta * (1 + nu)
    nll = (
        0.5 * math.log(math.pi / nu)
        - alpha * math.log(omega)
        + (alpha + 0.5) * math.log(nu * r * r + omega)
        + math.lgamma(alpha)
        - math.lgamma(alpha + 0.5)
    )
    expected = nll + lam * abs(r) * (2 * nu + alpha)
    # the second entry is masked out: its values must not count
    t = [[gamma, 9.0]], [[nu, 1.0]], [[alpha, 2.0]], [[beta, 1.0]], [[y, -7.0]]
    g, n, a, b, target = (torch.tensor(v, dtype=torch.float64) for v in t)
    mask = torch.tensor([[True, False]])
    got = evidential_loss(g, n, a, b, target, mask, weight=lam).item()
    assert got == pytest.approx(expected, rel=1e-12)
    # the NLL is the negative log-density of the NIG's marginal: a Student-t (Amini et al. eq. 8)
    df, scale = torch.tensor(
        [2 * alpha, math.sqrt(beta * (1 + nu) / (nu * alpha))], dtype=torch.float64
    )
    student = torch.distributions.StudentT(df, torch.tensor(gamma, dtype=torch.float64), scale)
    no_reg = evidential_loss(g, n, a, b, target, mask, weight=0.0).item()
    assert no_reg == pytest.approx(
        -student.log_prob(torch.tensor(y, dtype=torch.float64)).item(), rel=1e-10
    )


def test_split_constraints_and_total_variance() -> None:
    z = torch.tensor([[0.75, -20.0, 0.0, 3.0]])
    gamma, nu, alpha, beta = evidential_split(z, 1)
    assert gamma.item() == 0.75
    assert (
        nu.item() > 0
        and alpha.item() > 1
        and beta.item() == pytest.approx(F.softplus(torch.tensor(3.0)).item(), rel=1e-5)
    )
    assert alpha.item() == pytest.approx(1 + math.log(2), rel=1e-5)
    var = evidential_variance(torch.tensor(2.0), torch.tensor(3.0), torch.tensor(1.5)).item()
    # the Student-t's variance: df / (df - 2) scale², df = 2α, scale² = β(1+ν)/(να)
    assert var == pytest.approx(6 / 4 * 1.5 * 3 / (2 * 3), rel=1e-12)
    assert var == pytest.approx(1.5 / 2 + 1.5 / (2 * 2), rel=1e-12)  # aleatoric + epistemic


def test_evidential_model_predicts_value_and_total_std() -> None:
    stats = {"target_mean": [1.0], "target_std": [2.0], "target_names": ["y"]}
    model = DMPNNModel(4, 7, hidden_size=8, uncertainty="evidential", **stats)
    assert model.prediction_columns() == ["y", "y_std"]
    assert model.ffn[-1].out_features == 4
    z = torch.tensor([[0.5, 0.3, 1.0, -0.4]])
    model.calibration_scale.fill_(1.5)
    model._outputs = lambda batch: z  # type: ignore[method-assign]
    value, std = model.predict(None)[0].tolist()
    nu, alpha, beta = (F.softplus(torch.tensor(v)).item() for v in (0.3, 1.0, -0.4))
    alpha += 1
    sigma = math.sqrt(beta * (1 + nu) / (nu * (alpha - 1)))
    assert value == pytest.approx(0.5 * 2 + 1, rel=1e-6)
    assert std == pytest.approx(sigma * 2 * 1.5, rel=1e-4)
    with pytest.raises(ValueError, match="model.uncertainty=evidential .* task is classification"):
        DMPNNModel(4, 7, task="classification", uncertainty="evidential")


def test_evidential_run_calibrates_on_dev_and_predict_applies_it(tmp_path: Path) -> None:
    path = tmp_path / "mols.csv"
    rows = [f"m{k},{s},{0.3 * len(s) - 1:.2f}" for k, s in enumerate(SMILES)]
    path.write_text("id,smiles,y\n" + "\n".join(rows) + "\n")
    args = ["experiment=molecules_csv", "model=dmpnn", f"dataset.path={path}",
            "dataset.targets=[y]", "model.uncertainty=evidential", "model.hidden_size=16",
            "model.evidential_weight=0.1", "trainer.epochs=3", "trainer.plots=false",
            "trainer.progress=false", f"paths.cache_dir={tmp_path / 'cache'}"]  # fmt: skip
    results = run_train(compose_config(args, output_dir=tmp_path / "run"))
    for key in ("test_coverage90", "test_coverage90_uncalibrated", "test_miscalibration_area"):
        assert 0.0 <= results[key] <= 1.0, key
    (scale,) = results["calibration_scale"]
    run = load_trained(tmp_path / "run")
    assert run.model.evidential_weight == 0.1
    assert run.model.calibration_scale.item() == pytest.approx(scale) and scale != 1.0
    out = tmp_path / "pred.csv"
    run_predict(tmp_path / "run", str(path), out)
    with out.open() as f:
        got = [float(r["y_std"]) for r in csv.DictReader(f)]
    graphs = [g for g, _ in molecule_inputs(SMILES)]
    with torch.no_grad():
        _, nu, alpha, beta = evidential_split(run.model._outputs(run.model.collate(graphs)), 1)
    sigma = evidential_variance(nu, alpha, beta).sqrt()[:, 0] * run.model.target_std * scale
    assert got == pytest.approx(sigma.tolist(), rel=1e-5)


def test_evidential_weight_is_ranged_at_compose_time() -> None:
    base = ["experiment=molecules_csv", "model=dmpnn", "dataset.path=x.csv", "dataset.targets=[y]"]
    with pytest.raises(ConfigError, match=r"model.evidential_weight"):
        compose_config([*base, "model.uncertainty=evidential", "model.evidential_weight=-1"])
    cfg = compose_config([*base, "model=weave", "model.uncertainty=evidential"])
    assert cfg.model.uncertainty == "evidential" and cfg.model.evidential_weight == 0.2
