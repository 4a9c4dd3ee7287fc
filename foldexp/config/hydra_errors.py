"""Hydra's composition errors as foldexp's own: one line, status 2.

``foldexp train`` and ``foldexp bench`` (``foldexp/cli.py``) run Hydra's app inside
``composing()``, which sets ``HYDRA_FULL_ERROR=1`` so that an error in composing the config (a
wrongly typed or unknown override, a missing preset) is raised to the command instead of being
printed by Hydra with advice about its traceback and status 1. The app's task calls
``composition_done()`` first thing: from then on the run's own errors are reported as they
always were (a bug keeps its traceback), and the variable does not reach the run's child
processes. A user who set ``HYDRA_FULL_ERROR=1`` keeps Hydra's full tracebacks throughout.

Before that, ``check_command_line`` holds the overrides to what OmegaConf lets through: a
boolean key given ``2`` or ``on`` fails as a wrongly typed override does; and a model of the
user's own loses the keys an experiment preset set for its own model.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = [
    "composing",
    "composition_done",
    "still_composing",
    "check_command_line",
    "not_an_integer",
    "hydra_message",
    "misspelt_key",
    "launcher_error",
    "launcher_missing",
]

_MARK = "FOLDEXP_COMPOSING"
_users: str | None = None  # the user's own HYDRA_FULL_ERROR, put back when composition is done


@contextmanager
def composing() -> Iterator[None]:
    """Hydra raises composition errors within this context (unless the user asked for its
    full tracebacks, ``HYDRA_FULL_ERROR=1``)."""
    global _users
    if os.environ.get("HYDRA_FULL_ERROR") == "1":
        yield
        return
    _users = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"
    os.environ[_MARK] = "1"
    try:
        yield
    finally:
        composition_done()


def composition_done() -> None:
    """The config is composed: Hydra reports the run's errors itself again."""
    if os.environ.pop(_MARK, None) is None:
        return
    if _users is None:
        os.environ.pop("HYDRA_FULL_ERROR", None)
    else:
        os.environ["HYDRA_FULL_ERROR"] = _users


def still_composing() -> bool:
    """Whether an error now comes from composing the config under ``composing()``."""
    return os.environ.get(_MARK) is not None


def check_command_line(cfg: Any) -> None:
    """Checks what OmegaConf lets through the app's command-line overrides (a boolean key given
    ``2``: ``overrides.check_bool_overrides``), as a composition error of Hydra's, so that the
    command reports it as it reports a wrongly typed override. Call before
    ``composition_done()``."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.errors import ConfigCompositionException

    from foldexp.config.errors import ConfigError
    from foldexp.config.overrides import check_bool_overrides, drop_preset_model_keys

    overrides = list(HydraConfig.get().overrides.task)
    drop_preset_model_keys(cfg, overrides)  # a user's model gets only its own keys
    try:
        check_bool_overrides(cfg, overrides)
    except ConfigError as exc:
        raise ConfigCompositionException(f"Error merging override {exc}") from None


_MERGING = re.compile(r"Error merging override ([\w.]+)=(\S+)")


def not_an_integer(exc: BaseException) -> str | None:
    """An override that OmegaConf could not read as its integer key's value
    (``trainer.epochs=1e12``, ``2.5``) as one line naming the key, the value and the key's
    range: ``trainer.epochs=1e12; expected an integer, 1 <= value <= 1000000``; else ``None``."""
    cause = exc.__cause__
    found = _MERGING.match(str(exc))
    if found is None or "converted to Integer" not in str(cause):
        return None
    schema = getattr(cause, "object_type", None)
    name = getattr(cause, "key", None)
    fields = (
        {f.name: f for f in dataclasses.fields(schema)} if dataclasses.is_dataclass(schema) else {}
    )
    rng = fields[name].metadata.get("range") if name in fields else None
    return f"{found[1]}={found[2]}; expected an integer" + (f", {rng.describe()}" if rng else "")


_NO_SRUN = (
    "hydra/launcher=slurm submits jobs with SLURM's srun and sbatch, which this machine does "
    "not have; run the sweep on a SLURM cluster's login node, or here with "
    "hydra/launcher=joblib (or no launcher: one job after another)"
)


def launcher_missing(argv: list[str]) -> str | None:
    """One line when the command line sweeps (``-m``) with the SLURM launcher on a machine
    without ``srun``: told before Hydra writes the sweep folder, so a refused sweep leaves none."""
    slurm = {"hydra/launcher=slurm", "hydra/launcher=submitit_slurm"} & set(argv)
    if slurm and {"-m", "--multirun"} & set(argv) and shutil.which("srun") is None:
        return _NO_SRUN
    return None


def launcher_error(exc: RuntimeError) -> str | None:
    """One line for a launcher plugin that cannot run on this machine (submitit's SLURM
    launcher off a cluster, named by a preset: ``Could not detect "srun"``); ``None`` for any
    other error."""
    return _NO_SRUN if '"srun"' in str(exc) else None


#: The config groups a training run cannot do without: ``model=null`` or ``~model`` had been
#: Hydra's traceback ("Config group override must be a string") or a line about "dictionary
#: update sequence element #0".
REQUIRED_GROUPS = ("dataset", "model", "optimizer", "trainer", "device", "paths")


def removed_group(argv: list[str]) -> str | None:
    """The one-line error for a command-line argument that removes a required group
    (``model=null``, ``+model=null``, ``model=``, ``~model``, ``~model=NAME``), naming its
    options; ``None`` when none does."""
    from foldexp.config import CONF_DIR

    for arg in argv:
        bare = arg.lstrip("+")  # +model=null, ++model=null
        group = (bare[1:] if bare.startswith("~") else bare).split("=", 1)[0]
        value = bare.split("=", 1)[1] if "=" in bare else None
        if group in REQUIRED_GROUPS and (bare.startswith("~") or value in ("null", "")):
            names = sorted(p.stem for p in Path(CONF_DIR, group).glob("*.yaml"))
            return (
                f"{arg}: a run needs a {group}; choose one of its options with {group}=NAME "
                f"({', '.join(names)})"
            )
    return None


def misspelt_key(exc: BaseException) -> str | None:
    """``config.errors.unknown_key``'s line for an override of a key its section lacks: OmegaConf's
    cause carries the section (``parent_node``) and the key's full name."""
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError

    from foldexp.config.errors import unknown_key

    cause = exc.__cause__
    if not str(exc).startswith("Could not override") or not isinstance(
        cause, (ConfigAttributeError, ConfigKeyError)
    ):
        return None
    parent, key = getattr(cause, "parent_node", None), getattr(cause, "full_key", None)
    if parent is None or not key:
        return None
    owner = key.rsplit(".", 1)[0] if "." in key else "the config"
    kind = getattr(cause, "object_type", None)
    if isinstance(kind, type):
        owner += f" ({kind.__name__})"
    keys = [str(k) for k in parent.keys() if k != "hydra"]  # Hydra's own node: not a typo's
    return unknown_key(str(key), owner, keys)


def hydra_message(exc: BaseException) -> str:
    """Hydra's error and its cause (OmegaConf's, naming the value and the type it needed),
    without OmegaConf's lines about its own classes. A misspelt key (``trainer.epoch=3``) is
    told in one line with the closest keys, not with Hydra's advice to add it with ``+``."""
    integer = not_an_integer(exc)
    if integer is not None:
        return integer
    misspelt = misspelt_key(exc)
    if misspelt is not None:
        return misspelt
    lines = str(exc).splitlines()
    cause = exc.__cause__
    if cause is not None and str(cause) and str(cause) not in str(exc):
        first, *more = str(cause).splitlines()
        lines = [f"{lines[0].rstrip('.')}: {first}" if lines else first, *lines[1:], *more]
    internal = ("full_key:", "reference_type=", "object_type=", "Config search path:",
                "provider=")  # fmt: skip
    lines = [ln for ln in lines if not ln.strip().startswith(internal)]
    missing = re.search(r"Could not load '([^'/]+)/([^']+)'", lines[0] if lines else "")
    if missing:  # an option of a list (logger=[csv,nosuch]): Hydra lists no options then
        from foldexp.config import CONF_DIR  # the package above: not at import time

        group = missing.group(1)
        options = sorted(p.stem for p in Path(CONF_DIR, group).glob("*.yaml"))
        if options:
            lines = [f"{lines[0]} The options of {group} are: {', '.join(options)}"]
    preset = re.match(r"In 'experiment/([^']+)': ConfigKeyError", lines[0] if lines else "")
    if preset:  # dataset=sst under the default experiment: its dataset.n is not sst's
        name = preset.group(1)
        return (
            f"{' '.join(ln.strip() for ln in lines)}. experiment={name} sets that key for its own "
            "dataset and model; with another dataset= or model=, choose an experiment made for "
            "it (foldexp train --help lists them) or none: ~experiment"
        )
    return "\n".join(lines).strip()
