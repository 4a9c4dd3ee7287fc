"""Uncertainty of molecule regression: mean-variance estimation (``model.uncertainty=mve``) and
deep evidential regression (``model.uncertainty=evidential``: ``foldexp.models.evidential``).

With ``mve`` a molecule model's head gives two outputs a target: the mean and a raw variance
``v``, made positive as ``σ² = softplus(v) + 1e-6`` (chemprop's MVE head; both in standardised
units), and trains on the Gaussian negative log-likelihood ``½ (log σ² + (y − μ)² / σ²)``
(Nix & Weigend 1994), masked like the point loss.

Calibration (``calibrate``, after training, on the dev split): each target's σ is multiplied by
the scale ``s = |z|₍ₖ₎ / 1.645``, where ``z = (y − μ) / σ`` over the ``n`` dev molecules labelled
for it and ``|z|₍ₖ₎`` is the ``k``-th smallest ``|z|``, ``k = ⌈(n + 1) · 0.9⌉``: split conformal
prediction's finite-sample quantile (Vovk et al. 2005; Lei et al. 2018, "Distribution-free
predictive inference for regression"; Angelopoulos & Bates 2021, "A gentle introduction to
conformal prediction", §1), with the normalised residual ``|z|`` as the conformity score. If dev
and test molecules are exchangeable, the interval ``μ ± 1.645 s σ`` then covers a new molecule
with probability at least 0.9 (below ``0.9 + 1/(n + 1)`` without ties), however small ``n``;
the plain empirical quantile ``q₀.₉(|z|)`` falls short of 0.9 on average with a small dev
split. With ``n < 9``, ``k > n``: the largest ``|z|`` is used and a log line says so (the
guarantee needs ``n ≥ 9``). The scale is a buffer of the model, saved in ``best.pt`` and
applied by ``predict`` (``<target>_std``).

Metrics (``uncertainty_metrics``), with the calibrated σ, per target (``_<target>`` suffix, with
several targets) and as a mean over targets:

- ``coverage90``: the share of labelled molecules whose target lies in ``μ ± 1.645 s σ``
  (``coverage90_uncalibrated``: with ``s = 1``);
- ``miscalibration_area``: the mean over ``p = 0.01 … 0.99`` of ``|observed(p) − p|``, where
  ``observed(p)`` is the share inside the central ``p`` interval of the Gaussian (Tran et al.
  2020; chemprop's miscalibration area): 0 for calibrated σ, at most 0.5.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from foldexp.models.evidential import (
    EVIDENTIAL_WEIGHT,
    evidential_loss,
    evidential_split,
    evidential_variance,
)
from foldexp.models.temperature import per_target, split_outputs

__all__ = [
    "HEAD_OUTPUTS",
    "UNCERTAINTIES",
    "Z90",
    "calibrate_scale",
    "check_uncertainty",
    "coverage",
    "gaussian_nll",
    "interval_scale",
    "miscalibration_area",
    "mve_predict",
    "mve_split",
    "mve_statistics",
    "regression_loss",
    "spread_predict",
    "spread_split",
    "uncertainty_metrics",
]

log = logging.getLogger(__name__)

UNCERTAINTIES = ("none", "mve", "evidential")
#: head outputs a target: the point, mean and variance, or γ ν α β
HEAD_OUTPUTS = {"none": 1, "mve": 2, "evidential": 4}
Z90 = 1.6448536269514722  # the standard normal's 95th percentile: μ ± Z90 σ holds 90%
_MIN_VARIANCE = 1e-6


def mve_split(z: torch.Tensor, num_targets: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A head's ``(B, 2T)`` outputs → the mean ``(B, T)`` and the variance ``(B, T)``."""
    mean, raw = z[:, :num_targets], z[:, num_targets:]
    return mean, F.softplus(raw) + _MIN_VARIANCE


def spread_split(
    z: torch.Tensor, num_targets: int, uncertainty: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(B, kT)`` head outputs → the mean and the (uncalibrated, standardised) variance,
    ``(B, T)`` each, for ``mve`` or ``evidential`` (its total variance)."""
    if uncertainty == "evidential":
        _, nu, alpha, beta = evidential_split(z, num_targets)
        return z[:, :num_targets], evidential_variance(nu, alpha, beta)
    return mve_split(z, num_targets)


def regression_loss(
    z: torch.Tensor,
    z_target: torch.Tensor,
    mask: torch.Tensor,
    uncertainty: str,
    weight: float = EVIDENTIAL_WEIGHT,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """``(mean, variance or None, loss)`` of standardised head outputs ``z``: the masked squared
    error (``none``), Gaussian NLL (``mve``) or NIG loss with ``weight`` (``evidential``)."""
    num_targets = z_target.shape[1]
    if uncertainty == "evidential":
        gamma, nu, alpha, beta = evidential_split(z, num_targets)
        loss = evidential_loss(gamma, nu, alpha, beta, z_target, mask, weight)
        return gamma, evidential_variance(nu, alpha, beta), loss
    if uncertainty == "mve":
        mean, var = mve_split(z, num_targets)
        return mean, var, gaussian_nll(mean, var, z_target, mask)
    # Missing targets are stored as 0: where() keeps them (and their gradients) out.
    sq = torch.where(mask, (z - z_target) ** 2, torch.zeros_like(z))
    return z, None, sq.sum() / mask.sum().clamp(min=1)


def gaussian_nll(
    mean: torch.Tensor, var: torch.Tensor, target: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """The masked mean of ``½ (log σ² + (y − μ)² / σ²)`` (the constant ``½ log 2π`` left out)."""
    nll = 0.5 * (torch.log(var) + (target - mean) ** 2 / var)
    # Missing targets are stored as 0: where() keeps them (and their gradients) out.
    return torch.where(mask, nll, torch.zeros_like(nll)).sum() / mask.sum().clamp(min=1)


def interval_scale(z: torch.Tensor, level: float = 0.9) -> float:
    """The scale ``s`` that makes ``μ ± Φ⁻¹((1+level)/2) s σ`` a split-conformal ``level``
    interval for ``z = r / σ``: the ``⌈(n + 1) level⌉``-th smallest ``|z|`` over
    ``Φ⁻¹((1+level)/2)`` (module docstring); 1 when there is no ``z``."""
    n = len(z)
    if not n:
        return 1.0
    # The epsilon keeps an integral (n + 1) · level from rounding up (10 · 0.7 = 7.000…01).
    k = math.ceil((n + 1) * level - 1e-9)
    if k > n:
        log.warning(
            "uncertainty calibration: %d dev residuals are too few for the conformal %.2f "
            "quantile (rank %d > %d); the largest |z| is used",
            n,
            level,
            k,
            n,
        )
        k = n
    q = torch.sort(z.abs().double()).values[k - 1].item()
    return max(q / _normal_quantile(level), 1e-6)


def _normal_quantile(level: float) -> float:
    """``Φ⁻¹((1 + level) / 2)``: the half-width of the central ``level`` interval."""
    return math.sqrt(2.0) * torch.erfinv(torch.tensor(level, dtype=torch.float64)).item()


def coverage(z: torch.Tensor, scale: float = 1.0) -> float:
    """The share of ``|z| ≤ 1.645 scale``: what the nominal 90% interval covers."""
    return float((z.abs() <= Z90 * scale).double().mean()) if len(z) else math.nan


def miscalibration_area(z: torch.Tensor, scale: float = 1.0) -> float:
    """Mean ``|observed(p) − p|`` over ``p = 0.01 … 0.99`` (module docstring)."""
    if not len(z):
        return math.nan
    p = torch.linspace(0.01, 0.99, 99, dtype=torch.float64)
    half = math.sqrt(2.0) * torch.erfinv(p) * scale  # (99,)
    observed = (z.abs().double()[:, None] <= half[None, :]).double().mean(0)
    return float((observed - p).abs().mean())


def uncertainty_metrics(
    residual: torch.Tensor,
    sigma: torch.Tensor,
    labelled: torch.Tensor,
    scale: Sequence[float],
    suffixes: Sequence[str],
) -> dict[str, float]:
    """``coverage90``, ``coverage90_uncalibrated`` and ``miscalibration_area``, each the mean
    over targets, and per target when there are several. ``residual``, ``sigma``,
    ``labelled``: ``(N, T)`` over a split; ``scale``: each target's calibration scale."""
    names = ("coverage90", "coverage90_uncalibrated", "miscalibration_area")

    def metrics(k: int) -> dict[str, float]:
        z = (residual[:, k] / sigma[:, k])[labelled[:, k].bool()]
        values = (coverage(z, scale[k]), coverage(z), miscalibration_area(z, scale[k]))
        return dict(zip(names, values, strict=True))

    return per_target(names, suffixes, metrics)


def check_uncertainty(uncertainty: Any, task: str) -> str:
    """``model.uncertainty`` as a plain string; ``mve`` and ``evidential`` need a regression
    task."""
    value = str(getattr(uncertainty, "value", uncertainty))
    if value not in UNCERTAINTIES:
        raise ValueError(f"model.uncertainty={value}; expected one of {', '.join(UNCERTAINTIES)}")
    if value != "none" and task != "regression":
        raise ValueError(
            f"model.uncertainty={value} estimates a regression target's spread, but the task is "
            f"{task}; use model.uncertainty=none (or dataset.task=regression)"
        )
    return value


def spread_predict(
    z: torch.Tensor, uncertainty: str, mean: torch.Tensor, std: torch.Tensor, scale: torch.Tensor
) -> torch.Tensor:
    """``(B, kT)`` head outputs → ``(B, 2T)``: each target's value, then its calibrated standard
    deviation, in the target's units (``mve`` or ``evidential``)."""
    mu, var = spread_split(z, len(mean), uncertainty)
    sigma = var.sqrt() * std * scale
    return torch.stack([mu * std + mean, sigma], dim=2).reshape(len(z), -1)


def mve_predict(
    z: torch.Tensor, mean: torch.Tensor, std: torch.Tensor, scale: torch.Tensor
) -> torch.Tensor:
    """``(B, 2T)`` head outputs → ``(B, 2T)``: each target's value, then its calibrated
    standard deviation, both in the target's units (``<target>``, ``<target>_std``)."""
    return spread_predict(z, "mve", mean, std, scale)


def mve_statistics(
    err: torch.Tensor, var: torch.Tensor, std: torch.Tensor, mask: torch.Tensor
) -> dict[str, torch.Tensor]:
    """A batch's per-example ``residual`` and (uncalibrated) ``sigma`` in the targets' units and
    ``labelled``, ``(B, T)`` each: concatenated over a split for ``uncertainty_metrics``."""
    return {"residual": err, "sigma": (var.sqrt() * std).detach(), "labelled": mask}


def calibrate_scale(model: Any, examples: Sequence[Any], batch_size: int) -> dict[str, Any]:
    """Sets ``model.calibration_scale`` to each target's ``interval_scale`` over ``examples``
    (the dev split) and returns ``{"calibration_scale": [...]}``."""
    outs = split_outputs(model, examples, batch_size, ("residual", "sigma", "labelled"))
    if outs is None:
        return {}
    residual, sigma, labelled = outs
    scales = [
        interval_scale((residual[:, k] / sigma[:, k])[labelled[:, k].bool()])
        for k in range(residual.shape[1])
    ]
    model.calibration_scale.copy_(torch.tensor(scales, dtype=torch.float32))
    return {"calibration_scale": scales}
