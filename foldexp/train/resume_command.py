"""``foldexp train --resume RUN_DIR``: resume a run from its folder alone.

A run trained by ``foldexp train`` keeps its command line's overrides in
``RUN_DIR/.hydra/overrides.yaml``. ``expand_resume`` turns ``--resume RUN_DIR [key=value …]``
into those overrides, then the command line's own (later ones win: ``trainer.epochs=20`` trains
longer), then ``trainer.resume=true hydra.run.dir=RUN_DIR``; the run's checkpoint then refuses
any override that would change what it trains (``train/resume_config.py``), as a resume by hand
does.

The folder is read as the user's own run, but not trusted with code: an override that names a
``_target_`` or sets Hydra's own configuration (``hydra.*``, ``hydra/…``: callbacks are built
from it) is refused, naming it; resume such a run with its full command and
``trainer.resume=true hydra.run.dir=RUN_DIR``.
"""

from __future__ import annotations

from pathlib import Path

import yaml

__all__ = ["expand_resume"]

_FLAG = "--resume"


def _split(argv: list[str]) -> tuple[str | None, list[str]]:
    """``(RUN_DIR, the other arguments)`` of ``argv``; ``(None, argv)`` without ``--resume``."""
    for k, arg in enumerate(argv):
        if arg == _FLAG:
            if k + 1 >= len(argv) or argv[k + 1].startswith("-") or "=" in argv[k + 1]:
                raise ValueError("--resume needs the run folder: foldexp train --resume RUN_DIR")
            return argv[k + 1], argv[:k] + argv[k + 2 :]
        if arg.startswith(f"{_FLAG}="):
            return arg.split("=", 1)[1], argv[:k] + argv[k + 1 :]
    return None, argv


def _saved(run: Path) -> list[str]:
    """The overrides the run was trained with, checked."""
    path = run / ".hydra" / "overrides.yaml"
    how = f"foldexp train <its overrides> trainer.resume=true hydra.run.dir={run}"
    if not run.is_dir():
        raise ValueError(f"--resume {run}: no such folder")
    if not path.is_file():
        raise ValueError(
            f"--resume {run}: the folder has no .hydra/overrides.yaml (foldexp train writes it "
            f"once a run starts); resume with the run's command: {how}"
        )
    try:
        saved = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ValueError(f"{path}: not a list of overrides ({type(exc).__name__})") from None
    if saved is None:
        saved = []
    if not isinstance(saved, list) or not all(isinstance(o, str) for o in saved):
        raise ValueError(f"{path}: not a list of overrides (key=value strings)")
    kept = []
    for item in saved:
        key = item.lstrip("+~").split("=", 1)[0]
        if key in ("hydra.run.dir", "trainer.resume", "trainer.overwrite"):
            continue  # set below
        if key.startswith(("hydra.", "hydra/")) or key == "hydra" or "_target_" in key:
            raise ValueError(
                f"{path}: {item[:120]!r} is not taken from a folder (it could run code); "
                f"resume with the run's command: {how}"
            )
        kept.append(item)
    return kept


def expand_resume(argv: list[str]) -> list[str]:
    """``argv`` with ``--resume RUN_DIR`` (or ``--resume=RUN_DIR``) expanded into the run's own
    overrides, the other arguments, ``trainer.resume=true`` and ``hydra.run.dir=RUN_DIR``;
    ``argv`` itself without it. A ``ValueError`` says what is wrong, in one line."""
    folder, rest = _split(argv)
    if folder is None:
        return argv
    if {"-m", "--multirun"} & set(rest):
        raise ValueError(
            "--resume continues one run: leave out -m (each job of a sweep has its own)"
        )
    run = Path(folder)
    return [*_saved(run), *rest, "trainer.resume=true", f"hydra.run.dir={run}"]
