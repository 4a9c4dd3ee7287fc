"""Whether a checkpoint may be resumed under the current config (``trainer.resume``).

Every checkpoint stores the run's resolved config (``RunSettings.config``). Resuming compares it
with the new one and refuses a difference in anything that shapes the result (``seed``, ``model.*``,
``optimizer.*``, ``dataset.*``, the batch size, …), naming each key with its old and new value:
the resumed run would otherwise mix two experiments under the new one's name. ``MUST_MATCH``
names what is compared (``seed``, ``dataset.*``, ``model.*``, ``optimizer.*``, ``trainer.*``);
other groups (``device.*``, ``paths.*``, loggers) say how and where, not what. ``MAY_CHANGE``
lists the keys among those that may differ: how long to train and when to stop, where the data
lives, how the work is spread over processes, and what is shown. Paths inside values are
compared relative to ``paths.*``, so a data folder that moved is not a change. A key only the new
config has (a newer foldexp added it, with a default that keeps the old behaviour) is compared
with its schema default, which the old run had; one with no schema, or only in the old config,
is not compared. A checkpoint without a config (written before configs were stored) resumes
with a warning. Reading and writing the checkpoints themselves is ``checkpoint.py``.
"""

from __future__ import annotations

import fnmatch
import logging
from pathlib import Path
from typing import Any

from foldexp.config.targets import schema_defaults

__all__ = [
    "MAY_CHANGE",
    "MUST_MATCH",
    "ResumeConfigError",
    "config_changes",
    "refuse_changes",
]

log = logging.getLogger("foldexp.train")

# What a resumed run must share with the run it continues (fnmatch patterns over dotted keys);
# other groups (device.*, paths.*, logger.*, task_name, ...) say how and where, never what.
MUST_MATCH = ("seed", "dataset.*", "model.*", "optimizer.*", "trainer.*")
# Keys within those that may change all the same.
MAY_CHANGE = (
    "dataset.data_dir",  # locations, not contents
    "dataset.cache_dir",
    "trainer.epochs",  # train longer, or stop otherwise
    "trainer.max_steps",
    "trainer.patience",
    "trainer.resume",
    "trainer.overwrite",
    "trainer.trust_unverified",
    "trainer.checkpoint_every",
    "trainer.eval_batch_size",  # evaluation only: the same sums in other batches
    "trainer.num_workers",
    "trainer.progress",
    "trainer.plots",
    "trainer.log_every_s",
    "trainer.strategy",  # the global batch is the same on any number of processes
    "trainer.processes",
    "trainer.balance",
    "trainer.find_unused_parameters",
)


class ResumeConfigError(ValueError):
    """``trainer.resume=true`` with a config that differs from the checkpoint's run."""


def _flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(tree, dict):
        return {prefix: tree}
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        flat.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return flat


def _portable(flat: dict[str, Any]) -> dict[str, Any]:
    """String values under one of the ``paths.*`` folders rewritten relative to its key."""
    roots = [
        (k, v.rstrip("/")) for k, v in flat.items() if k.startswith("paths.") and isinstance(v, str)
    ]
    roots = sorted(((k, v) for k, v in roots if v), key=lambda kv: -len(kv[1]))  # deepest first
    out = {}
    for key, value in flat.items():
        if isinstance(value, str) and not key.startswith("paths."):
            for root_key, root in roots:
                if value == root or value.startswith(root + "/"):
                    value = "${" + root_key + "}" + value[len(root) :]
                    break
        out[key] = value
    return out


def config_changes(saved: dict[str, Any], current: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """``(key, old, new)`` for every ``MUST_MATCH`` key outside ``MAY_CHANGE`` that differs. A
    key the saved config lacks (a newer foldexp added it) counts as its schema default, which
    the saved run had: resuming an older Adam run with other ``optimizer.betas`` is refused."""
    old, new = _portable(_flatten(saved)), _portable(_flatten(current))
    defaults = schema_defaults(current)
    for key in new.keys() - old.keys():
        if key in defaults:
            old[key] = defaults[key]
    return [
        (key, old[key], new[key])
        for key in sorted(old.keys() & new.keys())
        if old[key] != new[key] and _compared(key)
    ]


def _compared(key: str) -> bool:
    def matches(patterns: tuple[str, ...]) -> bool:
        return any(fnmatch.fnmatchcase(key, p) for p in patterns)

    return matches(MUST_MATCH) and not matches(MAY_CHANGE)


def refuse_changes(path: Path, saved: dict[str, Any] | None, current: dict[str, Any]) -> None:
    """Refuses (``ResumeConfigError``) to resume checkpoint ``path``, whose run was configured
    as ``saved``, under ``current`` where a compared key differs."""
    if saved is None:
        log.warning("%s stores no config (written before configs were): not compared", path)
        return
    changes = config_changes(saved, current)
    if changes:
        listed = "; ".join(f"{k}: {old!r} in the run, {new!r} now" for k, old, new in changes)
        raise ResumeConfigError(
            f"trainer.resume=true but the config differs from the run in {path.parent.parent} "
            f"({path}): {listed}. Resume with the run's values, or train this config in another "
            "folder (hydra.run.dir=…), or replace the run with trainer.resume=false "
            "trainer.overwrite=true"
        )
