"""``foldexp eval RUN_DIR [key=value …]``: scores a trained run on a split or another file.

The run's model comes back from its folder (``foldexp.train.runs.load_trained``: the saved
vocabulary, target statistics and best weights), the dataset from the run's own dataset config with
the given overrides (``dataset.path=new.csv``, ``dataset.limit=100``,
``trainer.eval_batch_size=64``). Overrides are checked like a training config (ranges, unknown
keys); the rebuilt dataset must describe the same task (classes, targets, features) as the one the
model was trained on. The metrics go to ``eval.json`` (in the run folder, or ``--out``) and are
returned. Another file is cut into splits as the run's own was; ``split="all"`` scores every
example of it (the three splits together), and a run given another file that scores only one
split warns how many of the file's examples that is.

The dataset is read for the trained run (``build_dataset(..., trained=run.info)``): its labels
are looked up among the run's classes, so a file holding one class, or some, is scored with the
run's class ids; a metric the examples leave undefined (an AUC over one class) is ``null`` in
the result, listed under ``undefined`` and warned about, never a failure of the whole file. A
file whose columns have other names is told the key to name them with
(``dataset.label_column=COL``, ``dataset.targets=[COL]``); the targets given that way are the
run's targets under the file's names, so only their number must match.

A run folder names no other files: it may come from someone else, so a file or folder its config
names (``dataset.path``, ``dataset.word_vectors``, ``dataset.data_dir``: every ``a_path`` key of
the dataset's schema) is read only when the command line names it too
(``dataset.path=PATH``), or with ``run_paths`` (``--run-paths``: a run of one's own). The
run's featurisation cache folder is not used (a cache only saves time); file names inside
the given ``dataset.path`` (``train_file=train.txt``) are kept."""

from __future__ import annotations

import logging
import math
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from foldexp.config import TrainerConfig
from foldexp.config.checks import check_config
from foldexp.config.errors import ConfigError
from foldexp.config.settings import settings_of
from foldexp.config.targets import path_keys
from foldexp.experiments.build import build_dataset
from foldexp.train.artifacts import write_json
from foldexp.train.evaluate import evaluate
from foldexp.train.runs import RUN_INFO, load_trained

__all__ = ["run_eval", "SPLITS"]

SPLITS = ("train", "dev", "test", "all")  # all: the three together (a whole other file)
# ``info`` entries that say what the model predicts: a dataset that differs in them is another task.
_TASK_KEYS = ("num_classes", "task", "target_names", "class_names", "num_targets")
_ALLOWED_GROUPS = ("dataset.", "trainer.")
log = logging.getLogger(__name__)


def _own_paths(
    dataset: Any, overrides: Sequence[str], source: Path, run_paths: bool, command: str
) -> None:
    """Drops the run's cache folder from ``dataset`` (the merged config's section), after
    refusing any other file or folder it names that the command line (``overrides``) does not
    name, unless ``run_paths``. ``command``: the command line, for the two to type instead."""
    named = {o.lstrip("+").split("=", 1)[0] for o in overrides}
    for key in path_keys(str(dataset.get("_target_"))):
        value = dataset.get(key)
        if run_paths or f"dataset.{key}" in named or value in (None, ""):
            continue
        if key == "cache_dir":
            dataset[key] = None  # a cache only saves time: eval writes none where a folder says
        elif key.endswith("_file") and _a_name(str(value)):
            continue  # a file's name inside dataset.path, which must be given
        else:
            raise ConfigError(
                f"{source}: dataset.{key}={str(value)[:120]!r} names a file of this "
                "machine; a run folder names no other files (it may come from someone else), so "
                f"eval reads only those its command line names. A run of your own, on the "
                f"files it names: {command} --run-paths; on another file: {command} "
                f"dataset.{key}=PATH"
            )


def _a_name(value: str) -> bool:
    """A plain file name (``train.txt``): no folder, so it stays inside ``dataset.path``."""
    return bool(value) and Path(value).name == value and value not in (".", "..")


def _merged_config(saved: dict[str, Any], overrides: Sequence[str]) -> Any:
    for item in overrides:
        key = item.split("=", 1)[0].lstrip("+")
        if "=" not in item or not key.startswith(_ALLOWED_GROUPS):
            raise ConfigError(
                f"foldexp eval: {item!r}: expected KEY=VALUE with a dataset.* or trainer.* key"
            )
    cfg = OmegaConf.merge(
        OmegaConf.create(saved),
        OmegaConf.from_dotlist([o.lstrip("+") for o in overrides]),
    )
    check_config(cfg)
    return cfg


def _check_same_task(
    trained: dict[str, Any], now: dict[str, Any], run: Path, overrides: Sequence[str]
) -> None:
    named = {o.lstrip("+").split("=", 1)[0] for o in overrides}
    for key in _TASK_KEYS:
        if key == "target_names" and "dataset.targets" in named:
            continue  # the file's columns named for the run's targets: their number counts
        if key in trained and key in now and trained[key] != now[key]:
            raise ConfigError(
                f"foldexp eval: the dataset gives {key}={now[key]!r} but {run} was trained "
                f"with {key}={trained[key]!r}"
            )


def run_eval(
    run_dir: str | Path,
    overrides: Sequence[str] = (),
    split: str = "test",
    out: str | Path | None = None,
    allow_targets: Sequence[str] = (),
    run_paths: bool = False,
) -> dict[str, Any]:
    """Scores the run's best weights on ``split`` of its (overridden) dataset; writes
    ``eval.json`` and returns the metrics. ``run_paths``: read the files the run's config
    names that the overrides do not (a run of one's own)."""
    if split not in SPLITS:
        raise ConfigError(f"--split={split!r}; expected one of {', '.join(SPLITS)}")
    run = load_trained(run_dir, allow_targets)
    cfg = _merged_config(run.config, overrides)
    command = " ".join(["foldexp eval", *map(shlex.quote, [str(run_dir), *overrides])])
    command += f" --split {split}" if split != "test" else ""
    command += f" --out {shlex.quote(str(out))}" if out else ""
    _own_paths(cfg.dataset, overrides, run.folder / RUN_INFO, run_paths, command)
    bundle = build_dataset(cfg.dataset, trained=run.info)
    _check_same_task(run.info, bundle.info, run.folder, overrides)
    parts = [getattr(bundle, name) for name in SPLITS[:3]]
    examples = [e for part in parts for e in part] if split == "all" else getattr(bundle, split)
    if not examples:
        raise ConfigError(
            f"foldexp eval: the {split} split of the dataset is empty ({bundle.sizes()}); "
            "--split all scores every example"
        )
    trainer = settings_of(TrainerConfig, cfg.trainer, "trainer")
    metrics = evaluate(run.model, examples, trainer, torch.device("cpu"), split)
    undefined = sorted(k for k, v in metrics.items() if isinstance(v, float) and math.isnan(v))
    if undefined:
        log.warning(
            "%s: not defined on these %d examples (e.g. an AUC over examples of one class); "
            "reported as null",
            ", ".join(undefined), len(examples),
        )  # fmt: skip
        metrics = {k: None if k in undefined else v for k, v in metrics.items()}
    total = sum(len(part) for part in parts)
    if len(examples) < total and any(o.lstrip("+").startswith("dataset.") for o in overrides):
        # Another file is cut into the run's splits like its own: say that only a part counted.
        log.warning(
            "scored the %s split: %d of the dataset's %d examples (--split all scores them all)",
            split, len(examples), total,
        )  # fmt: skip
    result = {
        "run": str(run.folder),
        "split": split,
        "examples": len(examples),
        "dataset_examples": total,
        "overrides": list(overrides),
        **metrics,
        **({"undefined": undefined} if undefined else {}),
    }
    write_json(Path(out) if out else run.folder / "eval.json", result)
    return result
