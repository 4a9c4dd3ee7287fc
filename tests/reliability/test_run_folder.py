"""Run folders are never clobbered: one run at a time, and no silent replacement of a run.

A run holds an ``flock`` on ``<run dir>/.foldexp.lock`` for its life: a second run into the same
folder fails at once naming the folder and the owner's PID. A folder that already holds a run
(``results.json`` or a checkpoint) is refused unless the new run resumes it
(``trainer.resume=true``) or replaces it (``trainer.overwrite=true``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from foldexp.train.app import compose_config
from foldexp.train.artifacts import file_sha256
from foldexp.train.loop import run_train
from foldexp.train.rundir import LOCK_NAME, RunFolderError, lock_run_dir


def _snapshot(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): file_sha256(p)
        for p in folder.rglob("*")
        if p.is_file() and p.name != LOCK_NAME
    }


def test_second_run_is_refused_while_the_first_holds_the_folder(
    tiny: list[str], tmp_path: Path
) -> None:
    out = tmp_path / "shared"
    lock = lock_run_dir(out)  # the first run, as far as the folder can tell
    try:
        with pytest.raises(RunFolderError) as err:
            run_train(compose_config(tiny, out))
        message = str(err.value)
        assert str(out) in message and f"pid {os.getpid()}" in message
        assert _snapshot(out) == {}  # the refused run wrote nothing
    finally:
        lock.release()
    run_train(compose_config(tiny, out))  # free again
    assert (out / "results.json").exists()


def test_lock_held_by_another_process_names_its_pid(tiny: list[str], tmp_path: Path) -> None:
    out = tmp_path / "shared"
    holder = textwrap.dedent(
        f"""
        import sys, time
        from foldexp.train.rundir import lock_run_dir
        lock = lock_run_dir(__import__("pathlib").Path({str(out)!r}))
        print("locked", flush=True)
        sys.stdin.read()
        """
    )
    with subprocess.Popen(
        [sys.executable, "-c", holder], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as proc:
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
            with pytest.raises(RunFolderError, match=rf"another run \(pid {proc.pid} on "):
                run_train(compose_config(tiny, out))
        finally:
            proc.kill()  # as kill -9 would: the kernel drops the lock with the process
    lock_run_dir(out).release()


def test_lock_is_released_when_the_run_fails(tiny: list[str], run: Path) -> None:
    with pytest.raises(RunFolderError):
        run_train(compose_config(tiny, run))
    lock_run_dir(run).release()


def test_new_run_into_a_finished_folder_is_refused_then_overwritten(
    tiny: list[str], run: Path
) -> None:
    before = _snapshot(run)
    with pytest.raises(RunFolderError) as err:
        run_train(compose_config([*tiny, "seed=3"], run))
    message = str(err.value)
    assert str(run) in message and "results.json" in message and "checkpoints/last.pt" in message
    assert "trainer.resume=true" in message and "trainer.overwrite=true" in message
    assert _snapshot(run) == before  # untouched

    results = run_train(compose_config([*tiny, "seed=3", "trainer.overwrite=true"], run))
    assert results["seed"] == 3
    assert _snapshot(run)["results.json"] != before["results.json"]


def test_resume_and_overwrite_together_are_refused(tiny: list[str], run: Path) -> None:
    cfg = compose_config([*tiny, "trainer.resume=true", "trainer.overwrite=true"], run)
    with pytest.raises(RunFolderError, match="choose one"):
        run_train(cfg)


def test_run_killed_before_its_first_checkpoint_starts_again(
    tiny: list[str], tmp_path: Path
) -> None:
    out = tmp_path / "early"
    out.mkdir()
    (out / LOCK_NAME).write_text("1 on host\n")  # all a run leaves before its first checkpoint
    (out / "run_info.json").write_text("{}\n")
    run_train(compose_config(tiny, out))
    assert (out / "checkpoints" / "last.pt").exists()
