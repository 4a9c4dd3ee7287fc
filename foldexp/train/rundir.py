"""Owning a run folder: one run at a time, no silent replacement, no stale leftovers.

``claim_run_dir(cfg, ctx)`` wraps a run (``loop.run_train``):

* **Lock.** An ``fcntl.flock`` on ``<run dir>/.foldexp.lock``, held for the run's life, which
  also records the owner's PID and host. A second run into the same folder fails at once, naming
  the folder and the owner. The kernel drops the lock when the owner dies, even by ``kill -9``,
  so a killed run never blocks its resume. Under DDP rank 0 alone locks and checks, and the other
  ranks raise the same error.
* **No silent replacement.** A folder that already holds a run (``results.json`` or a
  checkpoint) is refused unless ``trainer.resume=true`` (continue it; the config must match,
  ``resume.check_resume``) or ``trainer.overwrite=true`` (the old run's files are removed first,
  so nothing of it mixes with the new one). A run killed before its first checkpoint left nothing
  worth keeping and is simply started again. Hydra's default run folders carry a timestamp and
  a sweep gives each job its own folder, so ordinary runs never meet either check.
* **Stale temporary files.** ``artifacts.atomic_write`` names its temporary files
  ``.<name>.<pid>.<random>.tmp``; those of writers no longer alive (killed mid-write) are
  removed, as are PID-less ones from before that naming.

``repair_metrics`` rewrites ``metrics.csv`` (and the plots) from a resumed checkpoint's history:
``last.pt`` is written before ``metrics.csv``, so a kill between the two left it a row short.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd

from foldexp.config.settings import RunSettings
from foldexp.train import distributed as dd
from foldexp.train.artifacts import CHECKSUM_SUFFIX
from foldexp.train.checkpoint import check_resume
from foldexp.train.curves import plot_curves, write_metrics_csv
from foldexp.train.run_record import write_staged_record

try:
    import fcntl
except ImportError:  # not POSIX: no locking
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "LOCK_NAME",
    "RunFolderError",
    "RunLock",
    "claim_run_dir",
    "clean_stale_tmp",
    "lock_run_dir",
    "previous_run",
    "repair_metrics",
]

log = logging.getLogger("foldexp.train")

LOCK_NAME = ".foldexp.lock"
# A run's own files and folders, removed by trainer.overwrite=true (with .sha256 sidecars).
_RUN_FILES = ("results.json", "metrics.csv", "run_info.json", "ranks.csv")
_RUN_FOLDERS = ("checkpoints", "tensorboard")
# What else a run writes: a folder holding any of these (or a .png) but no lock is not a run's.
_RUN_OTHERS = ("results.md", "per_task.csv", ".hydra")
_TMP = re.compile(r"^\..+\.(?P<pid>\d+)\.[A-Za-z0-9_]+\.tmp$")


class RunFolderError(RuntimeError):
    """The run folder is in use by another run, or already holds one."""


# Descriptors of the locks this process holds. A forked child (a DataLoader worker) closes its
# copies: a flock lasts while any copy is open, so a straggling worker would keep the folder
# locked after its run ended.
_HELD: set[int] = set()


def _close_in_child() -> None:
    for fd in _HELD:
        with contextlib.suppress(OSError):
            os.close(fd)
    _HELD.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_in_child)


class RunLock:
    """An exclusive ``flock`` on a run folder's lock file; ``release()`` drops it."""

    def __init__(self, path: Path, fd: int | None) -> None:
        self.path, self._fd = path, fd
        if fd is not None:
            _HELD.add(fd)

    def stamp(self) -> None:
        """Records the owner (PID and host) in the lock file: once the run has the folder, so
        that a refused run leaves the previous owner's record as it was."""
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, f"{os.getpid()} on {socket.gethostname()}\n".encode(), 0)

    def release(self) -> None:
        if self._fd is not None:
            _HELD.discard(self._fd)
            os.close(self._fd)  # closing the last copy of the descriptor drops the flock
            self._fd = None


def lock_run_dir(out_dir: Path, stamp: bool = True) -> RunLock:
    """Takes ``out_dir``'s lock at once or raises ``RunFolderError`` naming the owner (or why
    the folder cannot be made); with ``stamp``, records this process as the owner at once
    (else ``RunLock.stamp`` does, once the run is sure to have the folder)."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunFolderError(
            f"paths.output_dir={out_dir}: cannot make the run folder ({exc.strerror or exc}); "
            "it is hydra.run.dir unless paths.output_dir is set"
        ) from None
    path = out_dir / LOCK_NAME
    if fcntl is None:
        return RunLock(path, None)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:  # someone holds it
        owner = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "unknown"
        os.close(fd)
        raise RunFolderError(
            f"{out_dir} is in use by another run (pid {owner}, lock {path}): wait for it to "
            "finish, or give this run its own folder (hydra.run.dir=…)"
        ) from None
    except OSError as exc:  # a file system without flock (some network mounts)
        os.close(fd)
        log.warning("cannot lock %s (%s): the run folder is not protected", path, exc)
        return RunLock(path, None)
    lock = RunLock(path, fd)
    if stamp:
        lock.stamp()
    return lock


def previous_run(out_dir: Path) -> list[str]:
    """The files that show ``out_dir`` holds a run: ``results.json``, checkpoints."""
    found = ["results.json"] if (out_dir / "results.json").exists() else []
    ckpt = out_dir / "checkpoints"
    found += sorted(f"checkpoints/{p.name}" for p in ckpt.glob("*.pt")) if ckpt.is_dir() else []
    return found


def _remove_previous_run(out_dir: Path, found: list[str]) -> None:
    log.warning("trainer.overwrite=true: removing the run in %s (%s)", out_dir, ", ".join(found))
    for name in _RUN_FOLDERS:
        shutil.rmtree(out_dir / name, ignore_errors=True)
    for name in _RUN_FILES:
        for path in (out_dir / name, out_dir / (name + CHECKSUM_SUFFIX)):
            path.unlink(missing_ok=True)


def _refusal(out_dir: Path, resume: bool, overwrite: bool, locked: bool) -> str | None:
    """Why the run may not have ``out_dir``, or ``None``. Unless ``locked`` (this process holds
    its lock), a folder without a lock file that holds what a run writes, but no run, is not a
    foldexp run folder: its files are someone else's, so even ``trainer.overwrite`` keeps off."""
    if resume and overwrite:
        return (
            "trainer.resume=true continues the run in the folder and trainer.overwrite=true "
            "replaces it: choose one"
        )
    found = previous_run(out_dir)
    lockless = not locked and not (out_dir / LOCK_NAME).exists()
    if found and overwrite and lockless:  # an old run's, or someone's own files: not removed
        return (
            f"{out_dir} holds {', '.join(found)} but no {LOCK_NAME} (not a run folder of this "
            "foldexp): trainer.overwrite=true removes only a run's files; give this run its own "
            "folder (hydra.run.dir=…)"
        )
    if found and not (resume or overwrite):
        return (
            f"{out_dir} already holds a run ({', '.join(found)}): continue it with "
            "trainer.resume=true, replace it with trainer.overwrite=true, or give this run its "
            "own folder (hydra.run.dir=…)"
        )
    theirs = _run_names(out_dir) if lockless and not found else []
    if theirs:
        return (
            f"{out_dir} is not a foldexp run folder (no {LOCK_NAME}) but holds "
            f"{', '.join(theirs[:5])}, which a run would write over: give this run its own "
            "folder (hydra.run.dir=…)"
        )
    return None


def _run_names(out_dir: Path) -> list[str]:
    """The names in ``out_dir`` that a run writes (its files, sidecars and plots)."""
    if not out_dir.is_dir():
        return []
    names = sorted(p.name for p in out_dir.iterdir())
    own = set(_RUN_FILES + _RUN_FOLDERS + _RUN_OTHERS)
    return [n for n in names if n.removesuffix(CHECKSUM_SUFFIX) in own or n.endswith(".png")]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def clean_stale_tmp(out_dir: Path) -> list[Path]:
    """Removes ``atomic_write`` temporary files in ``out_dir`` and ``checkpoints/`` whose writer
    is dead (or unnamed: from before PIDs were recorded); returns them."""
    removed = []
    for folder in (out_dir, out_dir / "checkpoints"):
        for path in folder.glob(".*.tmp") if folder.is_dir() else ():
            match = _TMP.match(path.name)
            pid = int(match["pid"]) if match else None
            if pid is not None and (pid == os.getpid() or _alive(pid)):
                continue
            path.unlink(missing_ok=True)
            removed.append(path)
    if removed:
        log.info("removed %d temporary file(s) left by killed writes in %s", len(removed), out_dir)
    return removed


def _claim(out_dir: Path, cfg: RunSettings) -> RunLock:
    """Rank 0's part: check, lock, check again, clean the folder, stamp the lock and write the
    run's record of its config (``run_record``). A refused run changes nothing: the folder is
    checked before the lock file is made, the lock stamped only once the checks pass, and what
    this call made (the folder, the lock file) is removed again."""
    resume, overwrite = bool(cfg.trainer.resume), bool(cfg.trainer.overwrite)
    refusal = _refusal(out_dir, resume, overwrite, locked=False)
    if refusal:
        raise RunFolderError(refusal)
    made = [p for p in (out_dir, out_dir / LOCK_NAME) if not p.exists()]
    lock = lock_run_dir(out_dir, stamp=False)
    try:
        refusal = _refusal(out_dir, resume, overwrite, locked=True)  # another run came first
        if refusal:
            raise RunFolderError(refusal)
        if resume:
            check_resume(out_dir / "checkpoints" / "last.pt", cfg.plain_config())
        found = previous_run(out_dir)
        if found and overwrite:
            _remove_previous_run(out_dir, found)
    except BaseException:
        lock.release()
        for path in reversed(made):
            with contextlib.suppress(OSError):
                path.rmdir() if path == out_dir else path.unlink()
        raise
    lock.stamp()
    clean_stale_tmp(out_dir)
    write_staged_record(out_dir)
    return lock


@contextlib.contextmanager
def claim_run_dir(cfg: RunSettings, ctx: dd.DistContext) -> Iterator[RunLock | None]:
    """Owns ``paths.output_dir`` for the ``with`` block (see the module docstring)."""
    out_dir = Path(cfg.paths.output_dir)
    lock, error = None, None
    if ctx.is_main:
        try:
            lock = _claim(out_dir, cfg)
        except Exception as exc:  # every rank must hear of it, or the others would wait
            error = exc
    if ctx.enabled:
        error = dd.broadcast(ctx, error)
    if error is not None:
        raise error
    try:
        yield lock
    finally:
        if lock is not None:
            lock.release()


def _csv_rows(path: Path) -> int | None:
    try:
        return len(pd.read_csv(path))
    except (OSError, ValueError):  # absent, empty or malformed: rewrite it
        return None


def repair_metrics(out_dir: Path, history: list[dict[str, Any]], plots: bool) -> bool:
    """Rewrites ``metrics.csv`` (and redraws the plots) from a resumed checkpoint's ``history``
    when the file disagrees with it in length; returns whether it did."""
    if not history:
        return False
    path = out_dir / "metrics.csv"
    rows = _csv_rows(path)
    if rows == len(history):
        return False
    log.warning(
        "%s had %s row(s), the checkpoint %d epoch(s) (a kill between the two writes): rewritten",
        path,
        "no readable" if rows is None else rows,
        len(history),
    )
    write_metrics_csv(path, history)
    if plots:
        plot_curves(path, out_dir)
    return True
