"""An Optuna study's direction follows the runs' selection metric (``foldexp.train.study``): a
classification study maximises the dev ROC AUC (a fixed ``minimize`` picked its worst trial),
a regression one minimises the dev RMSE, for every search preset; a contradicting direction is
refused in one line; the sweep ends naming the best trial's run folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from foldexp.cli import main
from foldexp.config import CONF_DIR
from foldexp.train.app import compose_config
from foldexp.train.study import study_direction

# each split holds molecules with a ring and without
TRAIN = ["CCO", "CCCC", "c1ccccc1", "CC(=O)O", "CCN", "OCCO", "CC(C)O", "ClCCl", "CCOCC",
         "C1CCCCC1", "c1ccoc1", "CCCCO", "C1CCOC1", "Oc1ccccc1"]  # fmt: skip
DEV = ["c1ccncc1", "CC#N", "Cc1ccccc1", "NCCO", "c1ccsc1", "FC(F)F", "C1CCNCC1", "C=CC",
       "c1ccc(O)cc1", "CCOC(=O)C", "C1CC1", "CCCCCC"]  # fmt: skip
TEST = ["c1ccc2ccccc2c1", "CCCl", "O=C1CCCCC1", "CS(C)=O"]
SMILES = TRAIN + DEV + TEST
FOLDS = ["train"] * len(TRAIN) + ["dev"] * len(DEV) + ["test"] * len(TEST)
SIZES = ["model.pair_size=6", "model.mlp_size=8"]
PRESETS = sorted(p.stem for p in (Path(CONF_DIR) / "hparams_search").glob("*.yaml"))


def _molecules(tmp_path: Path, classes: bool) -> Path:
    """A CSV of ring (0/1: classification) or length (numbers: regression) per molecule."""
    rows = [
        f"{s},{int(any(c.isdigit() for c in s)) if classes else len(s) / 3:.3g},{f}"
        for s, f in zip(SMILES, FOLDS, strict=True)
    ]
    path = tmp_path / ("rings.csv" if classes else "lengths.csv")
    path.write_text("smiles,y,fold\n" + "\n".join(rows) + "\n")
    return path


def _csv_args(tmp_path: Path, path: Path) -> list[str]:
    return [
        "experiment=molecules_csv",
        f"dataset.path={path}",
        "dataset.targets=[y]",
        "dataset.split=column",
        "dataset.split_column=fold",
        f"paths.cache_dir={tmp_path / 'cache'}",
    ]


@pytest.mark.parametrize("preset", PRESETS)
def test_every_search_preset_follows_the_selection_metric(preset: str) -> None:
    text = yaml.safe_load((Path(CONF_DIR) / "hparams_search" / f"{preset}.yaml").read_text())
    assert text["hydra"]["sweeper"]["direction"] == "auto"
    assert text["hydra"]["callbacks"]["study_direction"]["_target_"] == (
        "foldexp.train.study.StudyDirection"
    )


@pytest.mark.parametrize(
    ("kind", "overrides", "expected"),
    [
        ("tree classification", ["hparams_search=tree_lstm_optuna"], ("dev_accuracy", "maximize")),
        ("molecule regression (preset)",
         ["experiment=esol_weave", "hparams_search=molecules_optuna"], ("dev_rmse", "minimize")),
        ("sequence regression", ["experiment=addition_attention"], ("dev_mse", "minimize")),
        ("molecule classification (auto)", ["hparams_search=molecules_optuna"],
         ("dev_roc_auc", "maximize")),
        ("molecule regression (auto)", ["hparams_search=molecules_optuna"],
         ("dev_rmse", "minimize")),
    ],
)  # fmt: skip
def test_the_direction_of_each_task_kind(
    kind: str, overrides: list[str], expected: tuple[str, str], tmp_path: Path
) -> None:
    if "auto" in kind:  # the task comes from the file: 0/1 columns classify
        path = _molecules(tmp_path, classes="classification" in kind)
        overrides = [*_csv_args(tmp_path, path), *overrides]
    assert study_direction(compose_config(overrides, tmp_path / "run")) == expected


def test_a_classification_study_keeps_its_best_trial(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("optuna")
    sweep = tmp_path / "sweep"
    args = [
        "train", "-m", *_csv_args(tmp_path, _molecules(tmp_path, classes=True)),
        "hparams_search=molecules_optuna", "hydra.sweeper.n_trials=2",
        "hydra.sweeper.sampler.n_startup_trials=2", "trainer.epochs=1", "trainer.batch_size=4",
        "trainer.progress=false", "trainer.plots=false", *SIZES, f"hydra.sweep.dir={sweep}",
    ]  # fmt: skip
    assert main(args) == 0
    trials = {
        p.parent: json.loads(p.read_text())["best_dev_roc_auc"]
        for p in sweep.glob("*/results.json")
    }
    assert len(set(trials.values())) == 2  # two trials apart: the best is not the worst
    best = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    assert best["best_value"] == max(trials.values())  # was min: 'Directions: [minimize]'
    assert Path(best["best_run_dir"]) == max(trials, key=trials.__getitem__)
    out = capsys.readouterr().out
    assert "[study] direction: maximize dev_roc_auc" in out
    assert f"[study] best trial: {best['best_run_dir']} (dev_roc_auc=" in out


def test_a_direction_against_the_metric_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("optuna")
    sweep = tmp_path / "sweep"
    args = ["train", "-m", "hparams_search=tree_lstm_optuna", "hydra.sweeper.direction=minimize",
            f"hydra.sweep.dir={sweep}"]  # fmt: skip
    with pytest.raises(SystemExit) as exit_:
        main(args)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "foldexp train: error: hydra.sweeper.direction=minimize, but each trial returns "
        "dev_accuracy (trainer.select_metric), which the study must maximize; leave the "
        "direction to the preset (auto: the selection metric's), or choose another metric with "
        "trainer.select_metric= and trainer.select_mode="
    ]
    assert not sweep.exists()  # refused before any trial
