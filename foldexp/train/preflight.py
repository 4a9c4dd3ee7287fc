"""Checks a run can only make after reading its data, made before the first training step.

The schema checks every key's range when the config is composed (``foldexp.validate``); what
depends on the data waits for it, but not for a whole epoch: empty splits and a selection metric
that the model does not report (found by scoring one small dev batch, with every RNG put back
afterwards so the run is the same as without the check). Whether the dataset's pretrained
vectors fit the model is checked where the two meet (``foldexp.experiments.build``).
"""

from __future__ import annotations

from typing import Any

import torch
from omegaconf import DictConfig

from foldexp.train import distributed as dd
from foldexp.train.checkpoint import rng_state, set_rng_state
from foldexp.validate import ConfigError, plain

__all__ = ["check_bundle", "resolve_selection"]

_PROBE_EXAMPLES = 8  # dev examples scored to learn the model's metric names


def check_bundle(bundle: Any, cfg: DictConfig) -> None:
    """Fails before the model is built when a split is empty (whether the dataset's vectors fit
    the model is ``foldexp.experiments.build.check_vectors``)."""
    for split in ("train", "dev", "test"):
        if not len(getattr(bundle, split)):
            raise ConfigError(
                f"dataset {cfg.dataset.get('name', '')}: the {split} split is empty "
                f"({bundle.sizes()}); check dataset.limit, the split fractions or the files"
            )


def resolve_selection(model: Any, bundle: Any, cfg: DictConfig) -> tuple[str, str]:
    """``(trainer.select_metric, trainer.select_mode)``, ``auto`` taken from the model's
    ``selection()`` (else ``dev_loss``, lower is better), checked against the columns one dev
    batch produces."""
    tc = cfg.trainer
    metric, mode = str(tc.select_metric), plain(tc.select_mode)
    if metric == "auto":
        chosen = model.selection() if callable(getattr(model, "selection", None)) else None
        metric, mode = chosen or ("loss", "min")
        metric = f"dev_{metric}"
    columns = _dev_columns(model, bundle.dev[:_PROBE_EXAMPLES])
    if metric not in columns:
        raise ConfigError(
            f"trainer.select_metric={tc.select_metric!r}: this model reports no such column; "
            f"the dev columns are {', '.join(sorted(columns))}"
        )
    return metric, mode


def _dev_columns(model: Any, examples: list[Any]) -> set[str]:
    saved, was_training = rng_state(), model.training
    model.eval()
    try:
        with torch.no_grad():
            out = model(model.collate(examples))
            sums: dict[str, Any] = {}
            dd.accumulate(sums, out, len(examples))
            names = {"loss", *model.summarize(sums)}
    finally:
        model.train(was_training)
        set_rng_state(saved)
    return {f"dev_{name}" for name in names}
