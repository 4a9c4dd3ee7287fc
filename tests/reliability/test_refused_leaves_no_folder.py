"""A command that fails its checks leaves no run folder (``foldexp.train.refused``): Hydra makes
the timestamped folder before foldexp's checks run, and 25 empty ones were left in one sitting,
7 in the checkout's ``outputs/`` per ``make test``. A folder that held anything before, or a run
that trained, is kept."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from foldexp.cli import main


def _status(args: list[str]) -> int:
    try:
        return main(args)
    except SystemExit as exc:
        return int(exc.code or 0)


REFUSED = [
    ["train", "trainer.epochs=-1"],  # a check of foldexp's, in the app
    ["train", "trainer.progress=2"],  # a boolean OmegaConf lets through
    ["train", "experiment=molecules_csv", "dataset.path=nowhere.csv", "dataset.targets=[y]"],
    ["bench", "bench.repeats=0"],  # bench's Hydra writes .hydra/ first
]
if not torch.cuda.is_available():
    REFUSED.append(["train", "device=cuda"])


@pytest.mark.parametrize("args", REFUSED, ids=" ".join)
def test_a_refused_command_leaves_no_folder(
    args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the default run folder: outputs/<task>/<date_time> here
    assert _status(args) == 2
    assert list(tmp_path.iterdir()) == []  # no outputs/, no outputs/<task>/


def test_a_folder_of_ones_own_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    assert _status(["train", "trainer.epochs=-1", f"hydra.run.dir={mine}"]) == 2
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]
    # a folder outside the working directory: the folder goes, its parent stays
    elsewhere = tmp_path.parent / f"{tmp_path.name}_elsewhere"
    monkeypatch.chdir(mine)
    assert _status(["train", "trainer.epochs=-1", f"hydra.run.dir={elsewhere}/run"]) == 2
    assert elsewhere.is_dir() and not (elsewhere / "run").exists()
    elsewhere.rmdir()


def test_a_run_that_trained_keeps_its_folder(
    tiny: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The removal is for refusals only: a run in a new folder keeps it."""
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    assert _status(["train", *tiny, "trainer.epochs=1", f"hydra.run.dir={run}"]) == 0
    assert (run / "results.json").is_file()


# -m: Hydra's sweeper writes the sweep folder's multirun.yaml before the first job's overrides are
# composed, and a folder holding a multirun.yaml refuses the next sweep (run_record.SweepGuard):
# the corrected command had been told to resume or overwrite a sweep that never ran.
REFUSED_SWEEPS = [
    ["trainer.seed=0,1"],  # a key trainer lacks: Hydra refuses composing job 0
    ["seed=0,1", "trainer.epochs=-1"],  # a check of foldexp's, in job 0
    ["seed=0,1", "trainer.progress=2"],  # a boolean OmegaConf lets through
]


@pytest.mark.parametrize("own_dir", [False, True], ids=["default-folder", "sweep-dir"])
@pytest.mark.parametrize("args", REFUSED_SWEEPS, ids=" ".join)
def test_a_refused_sweep_leaves_no_folder(
    args: list[str], own_dir: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the default: outputs/<task>/multirun/<date_time> here
    where = [f"hydra.sweep.dir={tmp_path}/x/sweep"] if own_dir else []
    assert _status(["train", "-m", *args, *where]) == 2
    assert list(tmp_path.iterdir()) == []  # no multirun.yaml, no x/, no outputs/


def test_the_corrected_sweep_runs_where_the_refused_one_was(
    tiny: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    sweep = f"hydra.sweep.dir={tmp_path}/x/sweep"
    assert _status(["train", "-m", *tiny, "trainer.seed=0,1", sweep]) == 2
    assert _status(["train", "-m", *tiny, "seed=0,1", sweep]) == 0
    assert (tmp_path / "x/sweep/multirun.yaml").is_file()
    for job in ("0", "1"):
        assert (tmp_path / "x/sweep" / job / "results.json").is_file()


def test_a_sweep_folder_of_ones_own_is_kept(
    tiny: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder that was there before the command stays, as it was: without the multirun.yaml
    the refused sweep wrote into it, so the corrected sweep may go there."""
    monkeypatch.chdir(tmp_path)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    assert _status(["train", "-m", *tiny, "trainer.seed=0,1", f"hydra.sweep.dir={mine}"]) == 2
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]
    assert _status(["train", "-m", *tiny, "seed=0", f"hydra.sweep.dir={mine}"]) == 0
    assert (mine / "0" / "results.json").is_file()


def test_a_sweep_whose_job_trained_keeps_its_folder(
    tiny: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Job 0 trains, job 1 is refused: the sweep folder keeps job 0 and the multirun.yaml."""
    monkeypatch.chdir(tmp_path)
    sweep = tmp_path / "sweep"
    assert _status(["train", "-m", *tiny, "trainer.epochs=1,-1", f"hydra.sweep.dir={sweep}"]) == 2
    assert sorted(p.name for p in sweep.iterdir()) == ["0", "multirun.yaml"]
    assert (sweep / "0" / "results.json").is_file()
