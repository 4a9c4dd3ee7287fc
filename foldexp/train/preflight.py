"""Checks a run can only make after reading its data, made before the first training step.

The schema checks every key's range when the config is composed (``foldexp.config.checks``); what
depends on the data waits for it, but not for a whole epoch: empty splits and a selection metric
that the model does not report (found by scoring one small dev batch, with every RNG put back
afterwards so the run is the same as without the check), and a model whose parameters alone
would not fit the machine's memory (the sizes are in range, but a table grows with the
vocabulary: built on the meta device first, nothing allocated). Whether the dataset's pretrained
vectors fit the model is checked where the two meet (``foldexp.experiments.build``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from foldexp.config import enum_value as plain
from foldexp.config.errors import ConfigError
from foldexp.config.settings import TrainerSettings
from foldexp.experiments.build import meta_model
from foldexp.experiments.memory import physical_memory
from foldexp.train import distributed as dd
from foldexp.train.checkpoint import rng_state, set_rng_state

__all__ = [
    "check_bundle",
    "check_model_memory",
    "machine_memory",
    "resolve_selection",
    "selection_of",
]

_PROBE_EXAMPLES = 8  # dev examples scored to learn the model's metric names


def check_bundle(bundle: Any, dataset: Mapping[str, Any]) -> None:
    """Fails before the model is built when a split is empty (whether the dataset's vectors fit
    the model is ``foldexp.experiments.build.check_vectors``)."""
    for split in ("train", "dev", "test"):
        if not len(getattr(bundle, split)):
            raise ConfigError(
                f"dataset {dataset.get('name', '')}: the {split} split is empty "
                f"({bundle.sizes()}); check dataset.limit, the split fractions or the files"
            )


def machine_memory(device: torch.device) -> int | None:
    """The memory a model on ``device`` can take, in bytes: the machine's (a model is built on
    the CPU first), or less, a CUDA device's own; ``None`` where it cannot be told."""
    total = physical_memory()
    if device.type == "cuda" and torch.cuda.is_available():
        gpu = torch.cuda.get_device_properties(device).total_memory
        total = gpu if total is None else min(total, gpu)
    return total


def check_model_memory(
    model_cfg: Mapping[str, Any], info: Mapping[str, Any], device: torch.device
) -> None:
    """Fails before the model is built when its parameters alone would not fit the memory of
    the machine (or of the GPU), naming the model's sizes; training needs more again (the
    gradients and the optimizer's state), so this refuses only what cannot work at all. Each
    size is in its schema's range (``foldexp.config.MAX_WIDTH``), but their product and the
    vocabulary's size decide: ``model.hidden_size=100000`` ended in a traceback of torch's
    allocator after the data had loaded."""
    model = meta_model(model_cfg, info)
    total = machine_memory(device)
    if model is None or total is None:
        return
    need = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    if need <= total:
        return
    sizes = [
        f"model.{k}={v}"
        for k, v in model_cfg.items()
        if isinstance(v, int) and not isinstance(v, bool)
    ]
    vocab = info.get("vocab")
    if vocab is not None and hasattr(vocab, "__len__"):
        sizes.append(f"a vocabulary of {len(vocab)} words")
    where = "this GPU" if device.type == "cuda" else "this machine"
    raise ConfigError(
        f"model: its parameters alone take {_gib(need)}, more than the {_gib(total)} of memory "
        f"of {where} (training needs more again); its sizes: {', '.join(sizes)}"
    )


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def resolve_selection(model: Any, bundle: Any, tc: TrainerSettings) -> tuple[str, str]:
    """``(trainer.select_metric, trainer.select_mode)``, ``auto`` taken from the model's
    ``selection()`` (else ``dev_loss``, lower is better), checked against the columns one dev
    batch produces."""
    metric, mode = selection_of(model, str(tc.select_metric), plain(tc.select_mode))
    columns = _dev_columns(model, bundle.dev[:_PROBE_EXAMPLES])
    if metric not in columns:
        raise ConfigError(
            f"trainer.select_metric={tc.select_metric!r}: this model reports no such column; "
            f"the dev columns are {', '.join(sorted(columns))}"
        )
    return metric, mode


def selection_of(model: Any, metric: str, mode: str) -> tuple[str, str]:
    """``(metric, mode)`` as given, or for ``metric="auto"`` the model's ``selection()`` (else
    ``dev_loss``, lower is better); also what an Optuna study's direction follows
    (``foldexp.train.study``)."""
    if metric != "auto":
        return metric, mode
    chosen = model.selection() if callable(getattr(model, "selection", None)) else None
    metric, mode = chosen or ("loss", "min")
    return f"dev_{metric}", mode


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
