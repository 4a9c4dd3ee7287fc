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
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path

__all__ = ["no_folder_if_refused"]

#: what claiming a run folder writes before the run's first step (``train/rundir.py``,
#: ``train/run_record.py``, the log file Hydra opens at the first record)
CLAIM_FILES = {".foldexp.lock", ".hydra", "app.log", "train.log"}


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


def _remove(out_dir: Path) -> None:
    try:
        names = {p.name for p in out_dir.iterdir()}
    except OSError:
        return
    if not names <= CLAIM_FILES:
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
