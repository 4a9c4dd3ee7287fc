"""A run folder's record of its config, ``.hydra/``, written by foldexp once the folder is its.

Hydra would write ``.hydra/{config,hydra,overrides}.yaml`` into the run folder before any of
foldexp's code runs, so a run that the folder then refuses (it holds a finished run, another run
holds its lock, it is not a run folder at all) had already rewritten the folder's record, and
``foldexp report`` credited the old results to the refused run's overrides. ``train.yaml`` turns
Hydra's writing off (``hydra.output_subdir: null``); ``foldexp train``'s app stages the same three
files (``app.hydra_record``, ``staged_record``) and ``rundir.claim_run_dir`` writes them once the
checks have passed and the lock is the run's (``write_staged_record``). A run composed without
Hydra's app (``compose_config``) stages nothing and writes no record, as before.

``SweepGuard`` (a Hydra callback, ``train.yaml``'s ``hydra.callbacks``) refuses a sweep into a
folder that already holds one (its ``multirun.yaml``) before Hydra's sweeper writes over it,
unless ``trainer.resume`` or ``trainer.overwrite`` says what to do with its jobs.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback

from foldexp.train.artifacts import write_text
from foldexp.train.refused import sweep_starting

__all__ = ["SweepGuard", "staged_record", "write_staged_record"]

_STAGED: dict[str, str] = {}  # file name under .hydra/ -> its text, for the run in progress


@contextlib.contextmanager
def staged_record(files: Mapping[str, str]) -> Iterator[None]:
    """Stages the record of the run Hydra's app is about to start (``files``: each name under
    ``.hydra/`` and its text, ``app.hydra_record``) for ``write_staged_record``; drops it
    afterwards, written or not."""
    _STAGED.clear()
    _STAGED.update(files)
    try:
        yield
    finally:
        _STAGED.clear()


def write_staged_record(out_dir: Path) -> None:
    """Writes the staged record into ``out_dir/.hydra`` (each file atomically), once: nothing
    if none is staged, or it was written already."""
    for name, text in list(_STAGED.items()):
        write_text(out_dir / ".hydra" / name, text)
        del _STAGED[name]


class SweepGuard(Callback):
    """Refuses ``-m`` into a ``hydra.sweep.dir`` that holds an earlier sweep (its
    ``multirun.yaml``, or a job folder's lock file: an Optuna sweep writes no multirun.yaml),
    before anything is written: the new sweep's jobs would meet the old one's folders."""

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir))
        sweep_starting(sweep_dir)  # a refused sweep leaves its folder as it was (refused.py)
        trainer = config.get("trainer") or {}
        found = (sweep_dir / "multirun.yaml", *_job_locks(sweep_dir))
        held = [str(p.relative_to(sweep_dir)) for p in found if p.exists()]
        if not held:
            return
        if trainer.get("resume") or trainer.get("overwrite"):
            return
        # Hydra turns a callback's Exception into a warning and goes on: SystemExit stops it
        print(
            f"foldexp train: error: hydra.sweep.dir={sweep_dir} already holds a sweep "
            f"({', '.join(held[:3])}): give this sweep its own folder, or continue its jobs with "
            "trainer.resume=true (replace them with trainer.overwrite=true)",
            file=sys.stderr,
        )
        raise SystemExit(2)


def _job_locks(sweep_dir: Path) -> list[Path]:
    """The lock files of the run folders directly under ``sweep_dir`` (its jobs')."""
    if not sweep_dir.is_dir():
        return []
    return [job / ".foldexp.lock" for job in sorted(sweep_dir.iterdir()) if job.is_dir()]
