"""A prediction's spread over several passes: MC dropout and an ensemble of runs.

``foldexp predict RUN_DIR INPUT --mc-dropout N`` runs the model ``N`` times with its dropout
on (every ``nn.Dropout`` with ``p > 0`` in training mode; anything else, batch norm included,
stays in evaluation mode) after seeding torch's generator with ``--seed``, so two calls give the
same output (Gal & Ghahramani 2016). ``foldexp predict SWEEP_DIR INPUT`` predicts with every run
under the folder (``run_info.json`` and ``checkpoints/best.pt``): an ensemble (Lakshminarayanan
et al. 2017). Both pass their ``K`` predictions of each input to :func:`combine`:

- the prediction is the mean over the ``K`` passes;
- its spread, ``<column>_std``, is the population standard deviation of the ``K`` values; for
  a model that gives its own ``<target>_std`` (``model.uncertainty=mve`` or ``evidential``) the
  total ``sqrt(mean σ² + var of the means)`` (the law of total variance; chemprop's ensemble of
  MVE models).

For a classifier the columns are each task's probability and its spread
(``<task>_probability_std``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from foldexp.models.contract import ModelContractError
from foldexp.train.runs import RUN_INFO, TrainedRun, load_trained

__all__ = [
    "MC_DROPOUT_RANGE",
    "combine",
    "enable_dropout",
    "load_members",
    "spread_columns",
    "spread_forward",
]

MC_DROPOUT_RANGE = (2, 1000)  # --mc-dropout N: passes a batch
#: dataset keys that decide how an input is read: the members of an ensemble must agree on them
_INPUT_KEYS = (
    "_target_", "smiles_column", "text_column", "max_atoms", "max_smiles_chars", "tokenizer",
    "lowercase", "features", "feature_columns",
)  # fmt: skip


def spread_columns(columns: Sequence[str]) -> list[str]:
    """The columns of a combined prediction: each value column and its ``_std``."""
    out: list[str] = []
    for name in columns:
        if name.endswith("_std") and name[: -len("_std")] in columns:
            continue  # the model's own spread: combined into its value's
        out += [name, f"{name}_std"]
    return out


def combine(columns: Sequence[str], passes: torch.Tensor) -> torch.Tensor:
    """``(K, B, C)`` predictions (``columns``) → ``(B, C')`` (``spread_columns``): the mean
    and the spread of each value column (module docstring)."""
    passes = passes.double()
    parts = []
    for k, name in enumerate(columns):
        if name.endswith("_std") and name[: -len("_std")] in columns:
            continue
        values = passes[:, :, k]  # (K, B)
        var = values.var(dim=0, correction=0)
        own = f"{name}_std"
        if own in columns:  # mean σ² + var of the means
            var = var + (passes[:, :, columns.index(own)] ** 2).mean(0)
        parts += [values.mean(0), var.sqrt()]
    return torch.stack(parts, dim=1).float()


def enable_dropout(model: nn.Module, where: str) -> int:
    """Puts every dropout with ``p > 0`` of ``model`` in training mode; refuses a model
    without one in one line naming ``where`` (the run)."""
    found = 0
    for module in model.modules():
        if isinstance(module, nn.modules.dropout._DropoutNd) and module.p > 0:
            module.train()
            found += 1
    if not found:
        raise ValueError(
            f"--mc-dropout: MC dropout needs dropout > 0, and the model of {where} has none "
            "(trained with model.dropout=0); train with model.dropout=0.1, say"
        )
    return found


def load_members(
    run_dir: str | Path, allow_targets: Sequence[str] = (), fingerprint: bool = False
) -> list[TrainedRun]:
    """The run in ``run_dir``, or every run under it (a sweep folder: an ensemble), each loaded
    and checked as ``predict`` loads one; members must read their inputs alike and give the
    same columns."""
    folder = Path(run_dir)
    found = sorted(p.parent for p in folder.rglob(RUN_INFO)) if folder.is_dir() else []
    if (folder / RUN_INFO).is_file() or not found:
        return [load_trained(folder, allow_targets)]  # its own refusals for a non-run folder
    if fingerprint:
        raise ValueError(
            f"foldexp fingerprint: {folder} is a sweep of {len(found)} runs; give one run's folder"
        )
    runs = [load_trained(run, allow_targets) for run in found]
    first = runs[0]
    for run in runs[1:]:
        keys = [k for k in _INPUT_KEYS if _dataset(run).get(k) != _dataset(first).get(k)]
        if keys or _columns(run) != _columns(first):
            differ = ", ".join(f"dataset.{k}" for k in keys) or "their prediction columns"
            raise ValueError(
                f"foldexp predict: the runs {first.folder} and {run.folder} under {folder} "
                f"differ in {differ}; an ensemble's members must read the same inputs and "
                "predict the same columns"
            )
    return runs


def _dataset(run: TrainedRun) -> dict[str, Any]:
    dataset = run.config.get("dataset")
    return dataset if isinstance(dataset, dict) else {}


def _columns(run: TrainedRun) -> list[str]:
    columns = getattr(run.model, "prediction_columns", None)
    if not callable(columns):
        raise ModelContractError(f"{type(run.model).__name__} has no prediction_columns()")
    return list(columns())


def spread_forward(
    runs: Sequence[TrainedRun], columns: Sequence[str], mc_dropout: int, seed: int
) -> tuple[list[str], Callable[[TrainedRun, Sequence[Any]], torch.Tensor]]:
    """The combined columns and the forward of ``predict`` over ``runs`` (``mc_dropout``
    passes each, or one), seeded with ``seed`` now."""
    low, high = MC_DROPOUT_RANGE
    if mc_dropout and not low <= mc_dropout <= high:
        raise ValueError(f"--mc-dropout {mc_dropout}; expected {low} … {high} passes")
    passes = max(1, mc_dropout)
    if mc_dropout:
        for run in runs:
            enable_dropout(run.model, str(run.folder))
    torch.manual_seed(seed)
    names = list(columns)

    def forward(_: TrainedRun, examples: Sequence[Any]) -> torch.Tensor:
        out = []
        with torch.no_grad():
            for run in runs:
                batch = run.model.collate(list(examples))
                out += [run.model.predict(batch).detach().cpu() for _ in range(passes)]
        return combine(names, torch.stack(out))

    return spread_columns(names), forward
