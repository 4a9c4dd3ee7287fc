"""Hydra launchers for sweeps: the joblib and submitit configs compose with foldexp's, a
``submitit_local`` (and a joblib) multirun of two tiny jobs completes and ``foldexp report``
aggregates it, and a two-task submitit job trains as two DDP ranks.

The plugins are optional dependencies: without them these tests are skipped."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("hydra_plugins.hydra_joblib_launcher", reason="hydra-joblib-launcher")
pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="hydra-submitit-launcher")

TINY = ["dataset.n=300", "model.hidden_size=16", "model.embed_size=8", "debug=tiny"]


def _compose(overrides: list[str]):  # type: ignore[no-untyped-def]
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from foldexp.config import CONF_DIR, register_configs

    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose("train", overrides=overrides, return_hydra_config=True)


@pytest.mark.parametrize(
    "launcher, target",
    [
        ("joblib", "hydra_joblib_launcher.joblib_launcher.JoblibLauncher"),
        ("submitit_local", "hydra_submitit_launcher.submitit_launcher.LocalLauncher"),
        ("submitit_slurm", "hydra_submitit_launcher.submitit_launcher.SlurmLauncher"),
        ("slurm", "hydra_submitit_launcher.submitit_launcher.SlurmLauncher"),
    ],
)
def test_launcher_configs_compose(launcher: str, target: str) -> None:
    cfg = _compose([f"hydra/launcher={launcher}", "trainer=ddp"])
    assert cfg.hydra.launcher._target_.endswith(target)
    assert cfg.trainer.strategy == "ddp" and cfg.trainer.processes == 2


def test_slurm_preset_keys_and_overrides() -> None:
    cfg = _compose(
        [
            "hydra/launcher=slurm",
            "hydra.launcher.partition=gpu",
            "hydra.launcher.gpus_per_node=2",
            "hydra.launcher.tasks_per_node=2",
            "hydra.launcher.timeout_min=30",
            "+hydra.launcher.additional_parameters.mail-type=END",
        ]
    ).hydra.launcher
    assert (cfg.partition, cfg.gpus_per_node, cfg.tasks_per_node, cfg.timeout_min) == (
        "gpu",
        2,
        2,
        30,
    )
    assert cfg.cpus_per_task == 2 and cfg.additional_parameters["mail-type"] == "END"
    with pytest.raises(Exception, match="partiton"):
        _compose(["hydra/launcher=slurm", "hydra.launcher.partiton=gpu"])


@pytest.mark.slow  # about 30 s each on 2 busy cores: every job is a fresh Python process
@pytest.mark.parametrize("launcher", ["submitit_local", "joblib"])
def test_launcher_multirun_then_report(launcher: str, tmp_path: Path, run_foldexp) -> None:
    sweep = tmp_path / "sweep"
    extra = ["hydra.launcher.n_jobs=2"] if launcher == "joblib" else []
    run_foldexp(
        [
            "train",
            "-m",
            f"hydra/launcher={launcher}",
            *extra,
            "seed=1,2",
            "device.threads=1",
            *TINY,
            f"hydra.sweep.dir={sweep}",
        ],
        tmp_path,
    )
    run_foldexp(["report", str(sweep), "--metric", "test_accuracy"], tmp_path)
    table = pd.read_csv(sweep / "report.csv")
    assert sorted(table["seed"]) == [1, 2]
    assert pd.read_csv(sweep / "summary.csv")["count"].tolist() == [2]


@pytest.mark.slow  # about 20 s: two tasks, each a fresh Python process
def test_submitit_job_with_two_tasks_trains_as_two_ddp_ranks(tmp_path: Path, run_foldexp) -> None:
    """What a multi-node SLURM job does (nodes x tasks_per_node ranks), on submitit's local
    executor: the tasks become DDP ranks through ``export_submitit_env``."""
    sweep = tmp_path / "sweep"
    run_foldexp(
        [
            "train",
            "-m",
            "hydra/launcher=submitit_local",
            "hydra.launcher.tasks_per_node=2",
            "trainer.strategy=ddp",
            "device.threads=1",
            *TINY,
            f"hydra.sweep.dir={sweep}",
        ],
        tmp_path,
    )
    results = json.loads((sweep / "0" / "results.json").read_text())
    assert results["world_size"] == 2
    ranks = pd.read_csv(sweep / "0" / "ranks.csv")
    assert sorted(ranks["rank"].unique()) == [0, 1]


@pytest.mark.parametrize("launcher", ["slurm", "submitit_slurm"])
def test_slurm_off_a_cluster_is_one_line_and_no_folder(
    launcher: str, tmp_path: Path, monkeypatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """It was submitit's RuntimeError (``Could not detect "srun"``): a traceback, status 1, and a
    sweep folder holding multirun.yaml."""
    from foldexp.cli import main

    monkeypatch.setenv("PATH", str(tmp_path / "no_bin"))  # no srun on it
    sweep = tmp_path / "sweep"
    args = ["train", "-m", f"hydra/launcher={launcher}", "seed=1,2", f"hydra.sweep.dir={sweep}"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "foldexp train: error: hydra/launcher=slurm submits jobs with SLURM's srun and sbatch, "
        "which this machine does not have; run the sweep on a SLURM cluster's login node, or "
        "here with hydra/launcher=joblib (or no launcher: one job after another)"
    ]
    assert not sweep.exists()


def test_a_launcher_that_cannot_start_is_told_in_one_line() -> None:
    """The same line where the launcher is named another way (a preset): submitit's error."""
    from foldexp.config.hydra_errors import launcher_error

    srun = RuntimeError('Could not detect "srun", are you indeed on a slurm cluster?')
    assert "hydra/launcher=joblib" in str(launcher_error(srun))
    assert launcher_error(RuntimeError("something else")) is None
