"""``foldexp train``: the Hydra app, a thin shell over ``run_train``.

``compose_config`` builds the same config without running Hydra's app machinery, for tests and
notebooks (``output_dir`` stands in for Hydra's run folder); ``compose_dataset_config`` one
dataset's config, for ``foldexp data stats|import``.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import hydra
from omegaconf import DictConfig, OmegaConf, open_dict

from foldexp.config import CONF_DIR, register_configs
from foldexp.config.checks import check_config
from foldexp.config.errors import ConfigError, unknown_key
from foldexp.config.hydra_errors import check_command_line, composition_done
from foldexp.config.overrides import check_bool_overrides, drop_preset_model_keys

__all__ = [
    "INTERRUPTED",
    "main",
    "compose_config",
    "hydra_record",
    "interrupted_message",
    "compose_dataset_config",
    "help_text",
    "out_of_memory",
    "report_errors",
    "user_errors",
]

T = TypeVar("T")

register_configs()


def user_errors() -> tuple[type[BaseException], ...]:
    """What a user's config, data or folder can cause: reported as one line, no traceback."""
    from hydra.errors import HydraException

    from foldexp.data.errors import DataError
    from foldexp.models.contract import ModelContractError
    from foldexp.train.loop import TrainingDiverged
    from foldexp.train.rundir import RunFolderError

    return (
        ValueError,
        OSError,
        DataError,
        HydraException,
        ModelContractError,
        TrainingDiverged,
        RunFolderError,
    )


def report_errors(command: str, run: Callable[[], T]) -> T:
    """``run()``; a user error exits with status 2 and its message (``FOLDEXP_TRACEBACK=1``
    shows the traceback instead), and so does running out of memory: the sizes the config asks
    for are checked against the machine where they can be (``experiments.memory.check_memory``,
    ``train/preflight.py``), and what is left (activations of a batch too large for a GPU) is
    told in one line with what to make smaller."""
    try:
        return run()
    except user_errors() as exc:
        if os.environ.get("FOLDEXP_TRACEBACK"):
            raise
        print(f"foldexp {command}: error: {_without_prefix(str(exc))}", file=sys.stderr)
        raise SystemExit(2) from None
    except (MemoryError, RuntimeError) as exc:
        if not out_of_memory(exc) or os.environ.get("FOLDEXP_TRACEBACK"):
            raise
        detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        print(
            f"foldexp {command}: error: out of memory ({detail}); smaller sizes need less: "
            "trainer.batch_size, trainer.eval_batch_size, the model's and the dataset's sizes",
            file=sys.stderr,
        )
        raise SystemExit(2) from None


def _without_prefix(message: str) -> str:
    """``message`` without a leading ``foldexp COMMAND:`` of its own (a reader shared by several
    commands names one): the line already starts with the command (``foldexp eval: error: …``)."""
    return re.sub(r"^foldexp [a-z]+: ", "", message)


def out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` says an allocation failed: Python's and numpy's ``MemoryError``, torch's
    ``OutOfMemoryError`` (CUDA) and the ``RuntimeError`` of its CPU allocator."""
    return (
        isinstance(exc, MemoryError)
        or type(exc).__name__ == "OutOfMemoryError"
        or (isinstance(exc, RuntimeError) and "can't allocate memory" in str(exc))
    )


@hydra.main(version_base="1.3", config_path="../conf", config_name="train")
def main(cfg: DictConfig) -> float | None:
    """Trains; returns the selection metric so Hydra sweepers can optimise it."""
    from foldexp.train.refused import no_folder_if_refused

    with no_folder_if_refused(Path(cfg.paths.output_dir)):  # Hydra made it: a refusal removes it
        return _main(cfg)


def _main(cfg: DictConfig) -> float | None:
    check_command_line(cfg)  # what OmegaConf lets through (a boolean key given 2)
    composition_done()  # from here, errors are the run's (foldexp/config/hydra_errors.py)
    from foldexp.train.loop import run_train
    from foldexp.train.run_record import staged_record, write_staged_record

    try:
        with staged_record(hydra_record(cfg)):  # written into the run folder once it is claimed
            results = report_errors("train", lambda: run_train(cfg))
            if os.environ.get("RANK", "0") == "0":  # DDP spawned here: the ranks did not
                write_staged_record(Path(cfg.paths.output_dir))
    except KeyboardInterrupt:
        # caught here, outermost: the run folder's lock, atomic writes and DDP teardown have
        # already cleaned up on the way out (they handle BaseException)
        if os.environ.get("FOLDEXP_TRACEBACK"):
            raise
        print(interrupted_message(cfg.paths.output_dir), file=sys.stderr)
        raise SystemExit(INTERRUPTED) from None
    return results.get(f"best_{results['select_metric']}")


def hydra_record(cfg: DictConfig) -> dict[str, str]:
    """What Hydra writes into ``.hydra/`` (``hydra.output_subdir``, off in ``train.yaml``): the
    task's config, Hydra's and the overrides, as YAML; ``run_record`` writes them once the run
    folder is claimed."""
    from hydra.core.hydra_config import HydraConfig

    hydra_cfg = HydraConfig.get()
    return {
        "config.yaml": OmegaConf.to_yaml(cfg),
        "hydra.yaml": OmegaConf.to_yaml(OmegaConf.create({"hydra": hydra_cfg})),
        "overrides.yaml": OmegaConf.to_yaml(hydra_cfg.overrides.task),
    }


#: the groups ``foldexp train --help`` lists, as ``train.yaml``'s defaults list has them
HELP_GROUPS = ("experiment", "dataset", "model", "optimizer", "trainer", "device", "logger",
               "debug", "hparams_search", "paths", "hydra/launcher")  # fmt: skip


def help_text() -> str:
    """``foldexp train --help``: foldexp's own header and the options of each group, as files
    (the schemas a group's files start from, ``*_schema``, are no options of their own)."""
    groups = []
    for group in HELP_GROUPS:
        options = sorted(p.stem for p in (Path(CONF_DIR) / group).glob("*.yaml"))
        if group == "hydra/launcher":  # the plugins' own, where installed
            options = sorted({*options, "joblib", "submitit_local", "submitit_slurm"})
        groups.append(f"  {group}: {', '.join(options)}")
    return "\n".join([
        "foldexp train: trains a model (a Hydra app over plain run_train(cfg)).",
        "",
        "usage: foldexp train [experiment=NAME] [GROUP=OPTION ...] [KEY=VALUE ...]",
        "       foldexp train -m KEY=V1,V2 ...      a sweep: a run folder per job",
        "       foldexp train --resume RUN_DIR      a run goes on from its folder",
        "",
        "groups (GROUP=OPTION; foldexp/conf/GROUP/OPTION.yaml):",
        *groups,
        "",
        "Every key with its default: foldexp train [overrides] --cfg job. Each key's range and",
        "comment: foldexp/config/ (a typo or a value out of range fails naming the key).",
        "Hydra's own flags: --cfg job|hydra|all, --info, --hydra-help.",
    ])  # fmt: skip


INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command stopped by Ctrl-C


def interrupted_message(output_dir: str | Path) -> str:
    """The one line ``foldexp train`` prints when Ctrl-C stops it: where the run is and how to
    go on (README: "resume a killed run exactly")."""
    return (
        f"foldexp train: interrupted; the run folder is {output_dir} (it goes on from "
        "checkpoints/last.pt, the last saved point, if any); to continue, run the same command "
        f"with trainer.resume=true hydra.run.dir={output_dir}"
    )


def compose_config(
    overrides: list[str] | None = None,
    output_dir: str | Path | None = None,
    config_name: str = "train",
) -> DictConfig:
    """Composes a config from ``foldexp/conf`` with overrides, as the command line would."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose(
            config_name=config_name, overrides=list(overrides or []), return_hydra_config=True
        )
    HydraConfig.instance().set_config(cfg)
    check_bool_overrides(cfg, list(overrides or []))
    drop_preset_model_keys(cfg, list(overrides or []))
    with open_dict(cfg):
        if output_dir is not None:
            cfg.paths.output_dir = str(output_dir)
        del cfg["hydra"]
    if config_name == "train":
        check_config(cfg)
    return cfg


def compose_dataset_config(kind: str, overrides: Sequence[str]) -> DictConfig:
    """The dataset config ``dataset=KIND`` with ``key=value`` overrides of its own keys, for
    ``foldexp data stats|import``; a key the dataset does not have fails naming its keys."""
    for item in overrides:
        if "=" not in item:
            raise ValueError(f"foldexp data: {item!r}: expected KEY=VALUE, e.g. path=FILE")
    keys = [o.removeprefix("dataset.") for o in overrides]
    # ~experiment: the default experiment's dataset keys belong to another dataset; ~model:
    # the default model may read other examples than this dataset gives
    base = ["~experiment", "~model", f"dataset={kind}"]
    known = [k for k in compose_config(base).dataset if k != "_target_"]
    for key in keys:
        if key.split("=", 1)[0] not in known:
            raise ConfigError(unknown_key(f"dataset.{key.split('=', 1)[0]}", kind, known))
    return compose_config([*base, *(f"dataset.{k}" for k in keys)]).dataset
