"""Temperature scaling of molecule classification (Guo et al. 2017): ``model.temperature``.

After training, on the best weights, each task's logits ``z`` over the dev split are divided by
a temperature ``T > 0`` fitted to minimise the masked binary cross-entropy of
``sigmoid(z / T)`` (L-BFGS on ``log T``, so ``T`` stays positive). ``per_task`` fits one
temperature a task (each task's loss depends on its own only), ``shared`` one for all tasks,
``none`` none. The temperatures are a buffer of the model, saved in ``best.pt`` and in
``results.json`` (``temperature``), and ``predict`` and ``eval`` apply them; a ranking does
not change (ROC-AUC and PRC-AUC are the same), the probabilities do.

The calibration error reported once the temperatures are fitted (on test in ``results.json``,
and by ``eval``; ``ece``, and ``ece_uncalibrated`` with ``T = 1``) is the expected calibration
error with 10 equal-width bins of each task's positive probability over its
labelled molecules, ``Σ_b (n_b / n) |mean label_b − mean probability_b|``; the mean over tasks,
and per task (``_<target>``) when there are several.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

__all__ = [
    "TEMPERATURES",
    "calibrate_temperature",
    "calibration_metrics",
    "check_temperature",
    "expected_calibration_error",
    "fit_temperature",
    "masked_nll",
    "per_target",
    "split_outputs",
    "temperature_metrics",
]

TEMPERATURES = ("none", "per_task", "shared")
_BINS = 10
_LOG_T_LIMIT = 5.0  # T within e^±5: a dev split that says "infinitely confident" stays finite


def check_temperature(value: Any) -> str:
    """``model.temperature`` as a plain string."""
    text = str(getattr(value, "value", value))
    if text not in TEMPERATURES:
        raise ValueError(f"model.temperature={text}; expected one of {', '.join(TEMPERATURES)}")
    return text


def masked_nll(
    logits: torch.Tensor, labels: torch.Tensor, labelled: torch.Tensor, temperature: torch.Tensor
) -> torch.Tensor:
    """The mean binary cross-entropy of ``sigmoid(logits / temperature)`` over labelled
    entries; ``logits``, ``labels``, ``labelled``: ``(N, T)``; ``temperature``: ``(T,)`` or
    ``(1,)``."""
    bce = F.binary_cross_entropy_with_logits(logits / temperature, labels, reduction="none")
    return torch.where(labelled, bce, torch.zeros_like(bce)).sum() / labelled.sum().clamp(min=1)


def fit_temperature(
    logits: torch.Tensor, labels: torch.Tensor, labelled: torch.Tensor, shared: bool = False
) -> torch.Tensor:
    """The ``(T,)`` temperatures minimising ``masked_nll`` (one value repeated if ``shared``);
    1 for a task without labelled entries."""
    logits, labels = logits.detach().double(), labels.detach().double()
    labelled = labelled.bool()
    tasks = logits.shape[1]
    log_t = torch.zeros(1 if shared else tasks, dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.LBFGS(
        [log_t], lr=0.5, max_iter=200, line_search_fn="strong_wolfe", tolerance_grad=1e-9
    )

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = masked_nll(logits, labels, labelled, log_t.clamp(-_LOG_T_LIMIT, _LOG_T_LIMIT).exp())
        loss.backward()
        return loss

    if labelled.any():
        optimizer.step(closure)
    fitted = log_t.detach().clamp(-_LOG_T_LIMIT, _LOG_T_LIMIT).exp().expand(tasks).clone()
    if not shared:
        fitted[~labelled.any(0)] = 1.0
    return fitted.float()


def expected_calibration_error(probability: torch.Tensor, labels: torch.Tensor) -> float:
    """ECE over 10 equal-width bins of ``probability`` (1-D, one task's labelled entries)."""
    if not len(probability):
        return math.nan
    p, y = probability.double(), labels.double()
    bins = (p * _BINS).long().clamp(max=_BINS - 1)  # [0, 0.1), …, [0.9, 1]
    error = 0.0
    for b in range(_BINS):
        inside = bins == b
        if inside.any():
            error += inside.double().mean().item() * abs((y[inside] - p[inside]).mean().item())
    return error


def temperature_metrics(
    logits: torch.Tensor,
    labels: torch.Tensor,
    labelled: torch.Tensor,
    temperature: torch.Tensor,
    suffixes: Sequence[str],
) -> dict[str, float]:
    """``ece`` (with the temperatures) and ``ece_uncalibrated`` (``T = 1``): the mean over
    tasks with labelled entries, and per task when there are several."""

    def metrics(k: int) -> dict[str, float]:
        rows = labelled[:, k].bool()
        z, y = logits[rows, k].double(), labels[rows, k]
        return {
            "ece": expected_calibration_error(torch.sigmoid(z / float(temperature[k])), y),
            "ece_uncalibrated": expected_calibration_error(torch.sigmoid(z), y),
        }

    return per_target(("ece", "ece_uncalibrated"), suffixes, metrics)


def per_target(
    names: Sequence[str], suffixes: Sequence[str], metrics: Callable[[int], dict[str, float]]
) -> dict[str, float]:
    """``metrics(k)`` of each target ``k`` (``suffixes[k]``): under ``<name>`` the mean of a
    metric's finite values over the targets, and under ``<name>_<suffix>`` each target's value
    where there are several."""
    per: dict[str, list[float]] = {name: [] for name in names}
    out: dict[str, float] = {}
    for k, suffix in enumerate(suffixes):
        for name, value in metrics(k).items():
            per[name].append(value)
            if len(suffixes) > 1:
                out[f"{name}_{suffix}"] = value
    for name, values in per.items():
        finite = [v for v in values if not math.isnan(v)]
        out[name] = sum(finite) / len(finite) if finite else math.nan
    return out


def calibration_metrics(model: Any, sums: Any) -> dict[str, float]:
    """A molecule classifier's ``temperature_metrics`` over a split's ``sums``, once its
    temperatures are fitted (``{}`` before: during training they are 1, and the two ECEs
    would be one curve; a run without temperatures has none)."""
    temperature = getattr(model, "temperature", None)
    if "logit" not in sums or temperature is None or bool((temperature == 1).all()):
        return {}
    temperature = temperature.detach().cpu()
    logits, labels = torch.as_tensor(sums["logit"]), torch.as_tensor(sums["label"])
    labelled = torch.as_tensor(sums["labelled"]).bool()
    return temperature_metrics(logits, labels, labelled, temperature, model._suffixes)


def calibrate_temperature(model: Any, examples: Sequence[Any], batch_size: int) -> dict[str, Any]:
    """Fits ``model.temperature`` on ``examples`` (the dev split; ``model.temperature_scaling``
    says ``per_task`` or ``shared``) and returns ``{"temperature": [...]}``."""
    outs = split_outputs(model, examples, batch_size, ("logit", "label", "labelled"))
    if outs is None:
        return {}
    logits, labels, labelled = outs
    shared = model.temperature_scaling == "shared"
    fitted = fit_temperature(logits, labels.float(), labelled.bool(), shared)
    model.temperature.copy_(fitted.to(model.temperature.device))
    return {"temperature": fitted.tolist()}


def split_outputs(
    model: Any, examples: Sequence[Any], batch_size: int, keys: Sequence[str]
) -> list[torch.Tensor] | None:
    """The eval-mode model's outputs ``keys`` over ``examples`` (a split), batch by batch, each
    concatenated on the CPU; ``None`` for no examples."""
    model.eval()
    parts: dict[str, list[torch.Tensor]] = {key: [] for key in keys}
    with torch.no_grad():
        for start in range(0, len(examples), batch_size):
            out = model(model.collate(list(examples[start : start + batch_size])))
            for key, values in parts.items():
                values.append(out[key].detach().cpu())
    if not examples:
        return None
    return [torch.cat(parts[key]) for key in keys]
