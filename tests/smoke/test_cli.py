"""The installed console script, run as a user would, in a subprocess from another directory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd

TINY = ["dataset.n=300", "model.hidden_size=16", "model.embed_size=8", "debug=tiny"]


def test_help_lists_commands(tmp_path: Path, run_foldexp) -> None:
    out = run_foldexp(["--help"], tmp_path).stdout
    for cmd in ("train", "bench", "data", "report", "demo"):
        assert f"  {cmd} " in out


def test_train_runs_from_any_directory(tmp_path: Path, run_foldexp) -> None:
    run_foldexp(["train", *TINY, f"hydra.run.dir={tmp_path / 'run'}"], tmp_path)
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert 0.0 <= results["test_accuracy"] <= 1.0
    assert (tmp_path / "run" / "metrics.csv").exists()


def test_train_cfg_job_prints_config(tmp_path: Path, run_foldexp) -> None:
    out = run_foldexp(["train", "--cfg", "job", "model.hidden_size=7"], tmp_path).stdout
    assert "hidden_size: 7" in out and "_target_: foldexp.models.tree_lstm" in out


def test_bad_override_fails_before_work(tmp_path: Path, run_foldexp) -> None:
    proc = run_foldexp(["train", "trainer.epoch=3"], tmp_path, check=False)
    assert proc.returncode != 0
    assert "epoch" in proc.stderr and not (tmp_path / "outputs").exists()


def test_multirun_then_report(tmp_path: Path, run_foldexp) -> None:
    sweep = tmp_path / "sweep"
    run_foldexp(["train", "-m", "seed=1,2", *TINY, f"hydra.sweep.dir={sweep}"], tmp_path)
    run_foldexp(["report", str(sweep), "--metric", "test_accuracy"], tmp_path)
    table = pd.read_csv(sweep / "report.csv")
    assert sorted(table["seed"]) == [1, 2]
    assert (sweep / "report.md").exists() and (sweep / "report.png").exists()
    summary = pd.read_csv(sweep / "summary.csv")
    assert summary["count"].tolist() == [2]


def test_python_dash_m(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "foldexp", "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0 and "commands:" in proc.stdout


def test_bench_toy_run_then_report_redraws_plots(
    tmp_path: Path, run_foldexp, toy_bench: list[str]
) -> None:
    run = tmp_path / "bench"
    toy = [*toy_bench, "bench.experiments=[table1]"]
    run_foldexp(["bench", *toy, f"hydra.run.dir={run}"], tmp_path)
    pngs = sorted(run.glob("*.png"))
    assert (run / "bench.csv").exists() and (run / "bench.md").exists() and pngs
    for p in pngs:
        p.unlink()
    out = run_foldexp(["report", str(run)], tmp_path).stdout
    assert "redrew" in out and sorted(run.glob("*.png")) == pngs
