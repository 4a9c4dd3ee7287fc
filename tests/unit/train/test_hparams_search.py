"""``foldexp train -m hparams_search=NAME``: an Optuna study from the command line (the
hydra-optuna-sweeper), whose objective is each run's dev selection metric at its best epoch
(``results.json``), a study that resumes from its storage, and ``foldexp report`` over its
trials."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from foldexp.cli import main
from foldexp.train.app import compose_config

TINY = ["dataset.n=60", "trainer.epochs=1", "trainer.progress=false", "trainer.plots=false",
        "model.embed_size=4", "hydra.sweeper.sampler.n_startup_trials=2"]  # fmt: skip


def _trials(folder: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*/results.json"))]


def test_a_small_study_runs_resumes_and_reports(tmp_path: Path) -> None:
    optuna = pytest.importorskip("optuna")
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    study = [f"hydra.sweeper.storage={storage}", "hydra.sweeper.study_name=tiny"]
    first = tmp_path / "first"
    args = ["train", "-m", "hparams_search=tree_lstm_optuna", *TINY, *study]
    assert main([*args, "hydra.sweeper.n_trials=2", f"hydra.sweep.dir={first}"]) == 0
    trials = _trials(first)
    assert len(trials) == 2
    rates = {t["config"]["optimizer"]["lr"] for t in trials}
    assert len(rates) == 2 and all(0.005 <= r <= 0.2 for r in rates)  # drawn from the preset
    best = yaml.safe_load((first / "optimization_results.yaml").read_text())
    assert best["best_value"] == max(t["best_dev_accuracy"] for t in trials)  # the objective
    # the same study goes on: a third trial, told the first two
    again = tmp_path / "again"
    assert main([*args, "hydra.sweeper.n_trials=1", f"hydra.sweep.dir={again}"]) == 0
    assert len(optuna.load_study(study_name="tiny", storage=storage).trials) == 3
    assert main(["report", str(first), str(again), "--metric", "test_accuracy"]) == 0
    assert (first / "report.md").read_text().count("optimizer.lr=") == 3


def test_the_molecule_preset_composes_with_esol(tmp_path: Path) -> None:
    cfg = compose_config(["experiment=esol_weave", "hparams_search=molecules_optuna"], tmp_path)
    assert cfg.model.name == "weave"  # the search's keys are the weave's
    text = Path(__file__).parents[3] / "foldexp/conf/hparams_search/molecules_optuna.yaml"
    preset = yaml.safe_load(text.read_text())
    assert preset["hydra"]["sweeper"]["direction"] == "auto"  # test_study_direction.py
    assert set(preset["hydra"]["sweeper"]["params"]) <= {f"optimizer.{k}" for k in ["lr"]} | {
        f"model.{k}" for k in cfg.model
    }
