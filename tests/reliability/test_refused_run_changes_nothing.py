"""A refused run changes nothing in its folder (issue 52, row 1).

Before: Hydra wrote ``.hydra/{config,overrides,hydra}.yaml`` into the run folder before
foldexp's checks ran, so a run refused because the folder held a finished run, a running run or
an earlier sweep's job still rewrote that folder's record of its config (``foldexp report`` then
credited the old results to the refused run's overrides); and a folder that was not a run (the
user's own ``metrics.csv``) was written over. Now Hydra writes no ``.hydra/`` (``train.yaml``:
``hydra.output_subdir: null``), foldexp writes the record once the folder is claimed
(``train/run_record.py``), and a refused run leaves every byte and every name as it was.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from foldexp.cli import main
from foldexp.train.rundir import LOCK_NAME, lock_run_dir


def _state(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (the lock file included) and its bytes; folders as names."""
    return {
        str(p.relative_to(folder)): p.read_bytes() if p.is_file() else b"<dir>"
        for p in sorted(folder.rglob("*"))
    }


def _train(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    try:
        code = main(["train", *args])
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, capsys.readouterr().err.strip()


@pytest.fixture
def cli_run(tiny: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """A finished run trained by ``foldexp train`` (so with its ``.hydra/`` record)."""
    out = tmp_path / "cli_run"
    code, err = _train([*tiny, "optimizer.lr=0.01", f"hydra.run.dir={out}"], capsys)
    assert code == 0, err
    return out


def test_the_record_is_the_trained_config(cli_run: Path) -> None:
    assert "optimizer.lr=0.01" in (cli_run / ".hydra" / "overrides.yaml").read_text()
    assert "lr: 0.01" in (cli_run / ".hydra" / "config.yaml").read_text()
    assert (cli_run / ".hydra" / "hydra.yaml").is_file()


def test_a_finished_run_refuses_and_keeps_every_byte(
    tiny: list[str], cli_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = _state(cli_run)
    code, err = _train([*tiny, "optimizer.lr=0.5", f"hydra.run.dir={cli_run}"], capsys)
    assert code == 2 and "already holds a run" in err and len(err.splitlines()) == 1, err
    assert _state(cli_run) == before
    assert "optimizer.lr=0.5" not in (cli_run / ".hydra" / "overrides.yaml").read_text()


def test_a_running_run_refuses_and_keeps_every_byte(
    tiny: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "busy"
    lock = lock_run_dir(out)  # the first run holds the folder
    try:
        (out / ".hydra").mkdir()
        (out / ".hydra" / "overrides.yaml").write_text("- optimizer.lr=0.01\n")
        before = _state(out)
        code, err = _train([*tiny, "optimizer.lr=0.5", f"hydra.run.dir={out}"], capsys)
        assert code == 2 and "in use by another run" in err, err
        assert _state(out) == before
    finally:
        lock.release()


def test_a_folder_that_is_not_a_run_is_refused_untouched(
    tiny: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "metrics.csv").write_text("my,own\n1,2\n")
    (mine / "notes.txt").write_text("keep\n")
    before = _state(mine)
    for extra in ([], ["trainer.overwrite=true"]):
        code, err = _train([*tiny, *extra, f"hydra.run.dir={mine}"], capsys)
        assert code == 2 and "not a foldexp run folder" in err and "metrics.csv" in err, err
        assert _state(mine) == before


def test_a_folder_with_files_of_its_own_but_none_a_run_writes_is_used(
    tiny: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "shared"
    out.mkdir()
    (out / "data.csv").write_text("a\n")
    code, err = _train([*tiny, f"hydra.run.dir={out}"], capsys)
    assert code == 0, err
    assert (out / "data.csv").read_text() == "a\n" and (out / "results.json").is_file()


def test_a_reused_sweep_folder_is_refused_untouched(
    tiny: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep = tmp_path / "sweep"
    code, err = _train(["-m", *tiny, "optimizer.lr=0.01,0.02", f"hydra.sweep.dir={sweep}"], capsys)
    assert code == 0, err
    assert "optimizer.lr=0.01" in (sweep / "0" / ".hydra" / "overrides.yaml").read_text()
    before = _state(sweep)
    code, err = _train(["-m", *tiny, "optimizer.lr=0.5,0.9", f"hydra.sweep.dir={sweep}"], capsys)
    assert code == 2 and "already holds a sweep" in err and len(err.splitlines()) == 1, err
    assert _state(sweep) == before
    # without multirun.yaml (an Optuna sweep writes none), its jobs' folders tell
    (sweep / "multirun.yaml").unlink()
    before = _state(sweep)
    code, err = _train(["-m", *tiny, "optimizer.lr=0.5,0.9", f"hydra.sweep.dir={sweep}"], capsys)
    assert code == 2 and "already holds a sweep (0/.foldexp.lock" in err, err
    assert _state(sweep) == before


def test_a_refused_run_into_a_new_folder_leaves_no_folder(
    tiny: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "new"
    code, err = _train(
        [*tiny, "trainer.resume=true", "trainer.overwrite=true", f"hydra.run.dir={out}"], capsys
    )
    assert code == 2 and "choose one" in err, err
    assert not out.exists() or not any(out.iterdir())


def test_an_old_run_without_a_lock_file_is_still_a_run(
    tiny: list[str], cli_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = tmp_path / "old"
    shutil.copytree(cli_run, old)
    os.unlink(old / LOCK_NAME)
    before = _state(old)
    code, err = _train([*tiny, f"hydra.run.dir={old}"], capsys)
    assert code == 2 and "already holds a run" in err, err
    assert _state(old) == before


def test_overwrite_removes_nothing_from_a_folder_without_a_lock(
    tiny: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Second pass: ``trainer.overwrite=true`` into someone's folder holding a results.json (no
    lock file: not a run of this foldexp) had removed their files."""
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "results.json").write_text('{"mine": 1}\n')
    (theirs / "metrics.csv").write_text("my,own\n")
    before = _state(theirs)
    code, err = _train([*tiny, "trainer.overwrite=true", f"hydra.run.dir={theirs}"], capsys)
    assert code == 2 and "no .foldexp.lock" in err, err
    assert _state(theirs) == before
