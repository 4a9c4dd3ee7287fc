"""Issue 39, row 16: training into a full disk ends with one line, nothing half-written.

A write the disk refuses (``ENOSPC``, injected into the primitive each file is written with:
``torch.save`` for a checkpoint, ``DataFrame.to_csv`` for ``metrics.csv``, ``Path.write_text``
for ``results.json``) ends ``foldexp train`` with status 2 and one line naming the file and the
space; the run folder's lock is free, every file is the last good version that its sidecar
vouches for (no ``best.pt`` newer than ``last.pt``), and a resume once there is room finishes
the run. Before, a checkpoint's write raised torch's ``unexpected pos`` in a traceback, and the
others ``[Errno 28] No space left on device`` naming no file.
"""

from __future__ import annotations

import errno
import hashlib
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch

from foldexp.cli import main
from foldexp.train.artifacts import verify_file
from foldexp.train.checkpoint import read_checkpoint
from foldexp.train.rundir import lock_run_dir


def _full(name: str, original: Any) -> Any:
    """``original`` (a writer taking the object to write, then a path or file) failing with
    ENOSPC part-way when it writes ``name``'s temporary file."""

    def write(*args: Any, **kwargs: Any) -> Any:
        target = args[1] if len(args) > 1 else kwargs.get("f", kwargs.get("path_or_buf"))
        where = str(getattr(target, "name", target))
        if f".{name}." not in Path(where).name:
            return original(*args, **kwargs)
        if hasattr(target, "write"):
            target.write(b"\0" * 4096)  # part of it reached the disk
        raise OSError(errno.ENOSPC, "No space left on device")

    return write


def _text(name: str) -> Any:
    original = Path.write_text

    def write_text(self: Path, data: str, *args: Any, **kwargs: Any) -> int:
        if f".{name}." in self.name:
            raise OSError(errno.ENOSPC, "No space left on device")
        return original(self, data, *args, **kwargs)

    return write_text


def _digests(run: Path) -> dict[str, str]:
    names = ["checkpoints/last.pt", "checkpoints/best.pt", "metrics.csv", "results.json"]
    return {n: hashlib.sha256((run / n).read_bytes()).hexdigest() for n in names}


def _train(tiny: list[str], run: Path, *more: str) -> int:
    argv = ["train", *tiny, "trainer.epochs=2", "trainer.resume=true", f"hydra.run.dir={run}"]
    try:
        return main([*argv, *more])
    except SystemExit as exit_:
        return int(exit_.code or 0)


@pytest.mark.parametrize(
    "name, patch",
    [
        ("last.pt", lambda mp: mp.setattr(torch, "save", _full("last.pt", torch.save))),
        ("metrics.csv", lambda mp: mp.setattr(pd.DataFrame, "to_csv",
                                               _full("metrics.csv", pd.DataFrame.to_csv))),
        ("results.json", lambda mp: mp.setattr(Path, "write_text", _text("results.json"))),
    ],
)  # fmt: skip
def test_a_full_disk_ends_the_run_on_one_line_and_it_resumes(
    name: str,
    patch: Any,
    tiny: list[str],
    run: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("FOLDEXP_TRACEBACK", raising=False)
    monkeypatch.chdir(run.parent)
    before = _digests(run)
    with monkeypatch.context() as mp:
        patch(mp)
        status = _train(tiny, run)
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2
    assert len(err) == 1, err
    failed = next(p for p in run.rglob(name) if not p.name.startswith("."))
    assert err[0].startswith(f"foldexp train: error: cannot write {failed}: No space left on")
    assert "free there" in err[0] and "trainer.resume=true" in err[0]
    lock_run_dir(run).release()  # the lock is free
    assert not list(run.rglob("*.tmp"))
    after = _digests(run)
    for file in ("checkpoints/best.pt", "checkpoints/last.pt", "metrics.csv", "results.json"):
        assert verify_file(run / file)  # each the version its sidecar records
    if name == "last.pt":  # epoch 1's best.pt was put back: last.pt still names epoch 0's
        assert after == before
    key = failed.relative_to(run).as_posix()
    assert after[key] == before[key]
    progress = read_checkpoint(run / "checkpoints" / "last.pt")["progress"]
    assert progress["epoch"] == (1 if name == "last.pt" else 2)

    assert _train(tiny, run) == 0  # room again: the run resumes and finishes
    assert len(pd.read_csv(run / "metrics.csv")) == 2
    assert read_checkpoint(run / "checkpoints" / "last.pt")["progress"]["epoch"] == 2
    assert verify_file(run / "results.json") and verify_file(run / "checkpoints" / "best.pt")


def test_a_first_epoch_that_cannot_be_saved_leaves_no_best_pt(
    tiny: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """best.pt is written before last.pt; when last.pt fails, the new best.pt goes too: the
    folder holds no run and starts again as it is."""
    monkeypatch.delenv("FOLDEXP_TRACEBACK", raising=False)
    run = tmp_path / "run"
    argv = ["train", *tiny, f"hydra.run.dir={run}"]
    with monkeypatch.context() as mp, pytest.raises(SystemExit) as exit_:
        mp.setattr(torch, "save", _full("last.pt", torch.save))
        main(argv)
    assert exit_.value.code == 2
    assert not list((run / "checkpoints").iterdir())
    assert main(argv) == 0  # not refused as a folder holding a run
    assert verify_file(run / "checkpoints" / "best.pt")
