"""A refused ``foldexp train`` leaves no run folder behind.

Hydra makes the run folder (``hydra.run.dir``, a new timestamped one by default) before
foldexp's code runs, so every command that then failed its checks (a value out of range, a
missing file, ``device=cuda`` without a GPU) left an empty folder, or one holding only what
claiming it writes (the lock, ``.hydra/``, ``app.log``): 25 in one sitting, 7 per ``make test``.
``no_folder_if_refused`` removes such a folder when the command ends with a user's error (status
2), if the folder was new when the command started (Hydra had just made it) and the run wrote
nothing else into it; a folder that held anything before, or holds a checkpoint or metrics now,
is left as it is. Its parents inside the working directory go too while they are empty
(``outputs/<task_name>/``, ``outputs/``).

A sweep (``-m``) is the same one level up: Hydra's sweeper writes the sweep folder's
``multirun.yaml`` before it composes the first job's overrides, and a folder holding one refuses
the next sweep (``run_record.SweepGuard``), so a misspelt key's corrected command had been told
to resume or overwrite a sweep that never ran. ``SweepGuard`` notes the sweep folder as it was
before Hydra wrote anything (``sweep_starting``); ``no_sweep_folder_if_refused`` puts it back
when the command ends with a user's error and nothing but the ``multirun.yaml`` is new in it (a
refused job's own folder is gone already): a new folder goes (and its empty parents, as above),
a folder that was there keeps all it held and loses only that ``multirun.yaml``. A sweep whose
jobs ran keeps everything.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = ["no_folder_if_refused", "no_sweep_folder_if_refused", "sweep_starting"]

#: what claiming a run folder writes before the run's first step (``train/rundir.py``,
#: ``train/run_record.py``, the log file Hydra opens at the first record)
CLAIM_FILES = {".foldexp.lock", ".hydra", "app.log", "train.log"}
SWEEP_FILE = "multirun.yaml"  # what Hydra's sweeper writes before the first job is composed

#: this command's sweep folder and what it held before Hydra wrote into it (``None``: it was
#: not there), noted by ``sweep_starting``
_sweep: dict[Path, set[str] | None] = {}


@contextlib.contextmanager
def no_folder_if_refused(out_dir: Path) -> Iterator[None]:
    """Removes ``out_dir`` when the block ends with a user's error (``SystemExit(2)``, or an
    error of Hydra's or of its config library, which ``foldexp train`` reports with status 2)
    and the folder was new on entry (empty, or only the ``.hydra/`` Hydra writes for ``foldexp
    bench``) and holds only ``CLAIM_FILES`` on exit."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    fresh = out_dir.is_dir() and {p.name for p in out_dir.iterdir()} <= {".hydra"}
    try:
        yield
    except SystemExit as exc:
        if fresh and exc.code == 2:
            _remove(out_dir)
        raise
    except (HydraException, OmegaConfBaseException):
        if fresh:
            _remove(out_dir)
        raise


def sweep_starting(sweep_dir: Path) -> None:
    """Notes ``sweep_dir`` as it is now, before Hydra's sweeper makes it or writes into it (from
    ``SweepGuard.on_multirun_start``), for ``no_sweep_folder_if_refused``."""
    sweep_dir = sweep_dir.absolute()  # a job may change the working directory
    try:
        _sweep[sweep_dir] = {p.name for p in sweep_dir.iterdir()} if sweep_dir.exists() else None
    except OSError:
        return  # not a folder we can read: Hydra's own error tells


def no_sweep_folder_if_refused(run: Callable[[], int]) -> int:
    """``run()``, a Hydra app's command; when it ends with a user's error (status 2, as returned
    or as ``SystemExit(2)``, or an error of Hydra's or of its config library), the sweep folder
    ``sweep_starting`` noted goes back to what it held (see the module's docstring)."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    _sweep.clear()
    refused = False
    try:
        status = run()
        refused = status == 2
        return status
    except SystemExit as exc:
        refused = exc.code == 2
        raise
    except (HydraException, OmegaConfBaseException):
        refused = True
        raise
    finally:
        if refused:
            _restore_sweeps()
        _sweep.clear()


def _restore_sweeps() -> None:
    for sweep_dir, before in _sweep.items():
        try:
            new = {p.name for p in sweep_dir.iterdir()} - (before or set())
        except OSError:
            continue
        if not new <= {SWEEP_FILE}:
            continue  # a job ran, or something else wrote here: keep it all
        if before is None:
            _remove(sweep_dir, {SWEEP_FILE})
        elif new:
            (sweep_dir / SWEEP_FILE).unlink(missing_ok=True)


def _remove(out_dir: Path, allowed: set[str] = CLAIM_FILES) -> None:
    try:
        names = {p.name for p in out_dir.iterdir()}
    except OSError:
        return
    if not names <= allowed:
        return  # the run wrote more than its claim: keep what it made
    shutil.rmtree(out_dir, ignore_errors=True)
    cwd = Path.cwd().resolve()
    for parent in out_dir.resolve().parents:  # outputs/<task_name>/, outputs/, if left empty
        if parent == cwd or cwd not in parent.parents:
            break  # never the working directory, nor anything outside it
        try:
            parent.rmdir()  # only an empty folder
        except OSError:
            break
