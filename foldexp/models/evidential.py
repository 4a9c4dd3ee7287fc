"""Deep evidential regression (Amini et al. 2020): ``model.uncertainty=evidential``.

The head gives four outputs a target, read as the parameters of a Normal-Inverse-Gamma
distribution over the target's mean and variance (standardised units): ``γ`` (the prediction),
``ν = softplus(·) + ε``, ``α = softplus(·) + 1 + ε`` and ``β = softplus(·) + ε`` (chemprop v2's
constraints; ``α > 1`` so that the variance exists). The loss is the NIG negative
log-likelihood (the Student-t of the marginal, Amini et al. eq. 8)

    ½ log(π/ν) − α log Ω + (α + ½) log(ν (y − γ)² + Ω) + log Γ(α) − log Γ(α + ½),
    Ω = 2β (1 + ν),

plus ``λ |y − γ| (2ν + α)`` (eq. 9: evidence spent on a wrong prediction is penalised), masked
like the point loss; ``λ`` is ``model.evidential_weight`` (chemprop v2's default, 0.2).

The predicted standard deviation is the **total** one, the predictive Student-t's:
``σ² = β (1 + ν) / (ν (α − 1))``, i.e. the aleatoric ``E[σ²] = β / (α − 1)`` plus the epistemic
``Var[μ] = β / (ν (α − 1))`` (chemprop's ``evidential-total``). It is calibrated on dev and
scored like ``mve``'s (``foldexp.models.uncertainty``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

__all__ = ["EVIDENTIAL_WEIGHT", "evidential_loss", "evidential_split", "evidential_variance"]

EVIDENTIAL_WEIGHT = 0.2  # λ: chemprop v2's EvidentialLoss(v_kl=0.2)
_EPS = 1e-6


def evidential_split(
    z: torch.Tensor, num_targets: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A head's ``(B, 4T)`` outputs → ``γ, ν, α, β``, ``(B, T)`` each (module docstring)."""
    t = num_targets
    gamma, raw_nu, raw_alpha, raw_beta = (
        z[:, :t],
        z[:, t : 2 * t],
        z[:, 2 * t : 3 * t],
        z[:, 3 * t :],
    )
    nu = F.softplus(raw_nu) + _EPS
    alpha = F.softplus(raw_alpha) + 1.0 + _EPS
    beta = F.softplus(raw_beta) + _EPS
    return gamma, nu, alpha, beta


def evidential_variance(nu: torch.Tensor, alpha: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """The total predictive variance ``β (1 + ν) / (ν (α − 1))`` (aleatoric + epistemic)."""
    return beta * (1.0 + nu) / (nu * (alpha - 1.0))


def evidential_loss(
    gamma: torch.Tensor,
    nu: torch.Tensor,
    alpha: torch.Tensor,
    beta: torch.Tensor,
    target: torch.Tensor,
    mask: torch.Tensor,
    weight: float = EVIDENTIAL_WEIGHT,
) -> torch.Tensor:
    """The masked mean of the NIG NLL plus ``weight`` times the evidence regulariser."""
    residual = target - gamma
    omega = 2.0 * beta * (1.0 + nu)
    nll = (
        0.5 * torch.log(math.pi / nu)
        - alpha * torch.log(omega)
        + (alpha + 0.5) * torch.log(nu * residual**2 + omega)
        + torch.lgamma(alpha)
        - torch.lgamma(alpha + 0.5)
    )
    loss = nll + weight * residual.abs() * (2.0 * nu + alpha)
    # Missing targets are stored as 0: where() keeps them (and their gradients) out.
    return torch.where(mask, loss, torch.zeros_like(loss)).sum() / mask.sum().clamp(min=1)
