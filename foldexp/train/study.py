"""An Optuna study's direction, from the runs' own selection metric, and its best run folder.

Each trial returns its run's dev selection metric at the best epoch (``best_<select_metric>``,
``train/app.py``), so the study must maximise it when larger is better (accuracy, ROC AUC) and
minimise it when smaller is (RMSE, MSE, loss): a fixed direction in a search preset picked the
worst trial of a classification study. ``StudyDirection`` (a Hydra callback, named by each
``conf/hparams_search/`` preset) sets ``hydra.sweeper.direction`` before the sweeper is built:
``auto`` (the presets' value) becomes the selection's direction, and a direction given on the
command line that contradicts it is refused in one line. With ``trainer.select_metric=auto`` the
metric is the model's (``selection()``): the dataset is read and the model built on the meta
device, as the first trial would. After the study, it prints the run folder holding the best
trial and adds it to ``optimization_results.yaml`` (``best_run_dir``).
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

import yaml
from hydra.experimental.callback import Callback
from omegaconf import open_dict, read_write

from foldexp.config.settings import plain_config
from foldexp.experiments.build import build_dataset, build_model, meta_model
from foldexp.train.preflight import selection_of

__all__ = ["StudyDirection", "best_run_dir", "study_direction"]

DIRECTIONS = {"max": "maximize", "min": "minimize"}


def study_direction(cfg: Any) -> tuple[str, str]:
    """``(select_metric, direction)`` of the runs ``cfg`` (a composed training config) makes:
    ``trainer.select_metric`` and ``trainer.select_mode``, or, for ``auto``, the model's
    choice for this dataset (a molecule CSV of 0/1 columns: ``dev_roc_auc``, maximised)."""
    trainer = plain_config(cfg.trainer)
    metric, mode = str(trainer["select_metric"]), str(trainer["select_mode"])
    if metric == "auto":
        info = build_dataset(cfg.dataset).info
        model = meta_model(cfg.model, info) or build_model(cfg.model, info)
        metric, mode = selection_of(model, metric, mode)
    return metric, DIRECTIONS[mode]


def best_run_dir(sweep_dir: Path, metric: str, value: float) -> Path | None:
    """The job folder under ``sweep_dir`` whose ``results.json`` has ``best_<metric>`` equal to
    the study's best value; ``None`` when none has (the best trial ran in an earlier session of
    a stored study, into another sweep folder)."""
    for results in sorted(sweep_dir.glob("*/results.json")):
        try:
            got = json.loads(results.read_text(encoding="utf-8")).get(f"best_{metric}")
        except (OSError, ValueError, AttributeError):
            continue  # a damaged or foreign file: not the best trial's
        if isinstance(got, (int, float)) and math.isclose(got, value, rel_tol=1e-12):
            return results.parent
    return None


def _refuse(message: str) -> NoReturn:
    # Hydra turns a callback's Exception into a warning and goes on: SystemExit stops it
    print(f"foldexp train: error: {message}", file=sys.stderr)
    raise SystemExit(2)


class StudyDirection(Callback):
    """Sets the Optuna study's direction from the selection metric, and names the best run."""

    def __init__(self) -> None:
        self.metric: str | None = None

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        sweeper = config.hydra.sweeper
        if "direction" not in sweeper:
            return  # not an Optuna sweep
        from foldexp.train.app import user_errors

        try:
            metric, direction = study_direction(config)
        except user_errors() as exc:
            _refuse(str(exc))
        given = str(getattr(sweeper.direction, "name", sweeper.direction))
        if given not in ("auto", direction):
            _refuse(
                f"hydra.sweeper.direction={given}, but each trial returns {metric} "
                f"(trainer.select_metric), which the study must {direction}; leave the "
                "direction to the preset (auto: the selection metric's), or choose another "
                "metric with trainer.select_metric= and trainer.select_mode="
            )
        with read_write(sweeper), open_dict(sweeper):
            sweeper.direction = direction
        self.metric = metric
        print(f"[study] direction: {direction} {metric} (trainer.select_metric)")

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        if self.metric is None:
            return
        sweep_dir = Path(str(config.hydra.sweep.dir))
        results_file = sweep_dir / "optimization_results.yaml"
        if not results_file.is_file():
            return
        results = yaml.safe_load(results_file.read_text(encoding="utf-8"))
        if not isinstance(results, Mapping) or "best_value" not in results:
            return
        best = best_run_dir(sweep_dir, self.metric, float(results["best_value"]))
        if best is None:
            print(
                f"[study] best trial: {self.metric}={results['best_value']}, run in an earlier "
                f"session of the study (not under {sweep_dir})"
            )
            return
        print(f"[study] best trial: {best} ({self.metric}={results['best_value']})")
        results = {**results, "best_run_dir": str(best)}
        results_file.write_text(yaml.safe_dump(results, sort_keys=False), encoding="utf-8")
