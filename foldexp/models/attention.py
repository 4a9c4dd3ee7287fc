"""Feed-forward attention (Raffel & Ellis 2016; the Fold paper's Appendix A) for the addition
and multiplication problems.

Every step ``x_t = (value, marker)`` goes through ``FC(hidden, relu)`` to ``h_t``; the paper's
``feed_forward_attention`` (reused as is) scores each step with ``e_t = a(h_t)``, normalises
``α = softmax(e)`` over the sequence and sums ``c = Σ_t α_t h_t``; an ``FC(hidden, relu)`` and a
linear unit read the answer out of ``c``. Raffel & Ellis's ``a`` is ``tanh(W h + b)``
(``score=tanh``); ``score=linear`` drops the ``tanh``, which lets the softmax single out two
steps among a thousand — the listing's ``exp`` is unguarded, so the linear score is clamped.
With ``tanh`` a step's weight is at most e² times another's, so the two marked values reach
``c`` diluted by the length; the experiments use ``linear``, which solves T ∈ [50, 1000].

``AttentionRegressor`` is the trainable model: mean-squared-error loss; metrics MSE and the
problems' accuracy, the fraction of predictions within 0.04 of the target
(``foldexp.data.accuracy_within``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

import foldexp.blocks as fb
from foldexp.compiler.schedule import Plan
from foldexp.executor.compiled import Compiler
from foldexp.models.paper import feed_forward_attention

__all__ = ["attention_network", "AttentionRegressor", "SequenceBatch"]

# exp(30) ≈ 1e13: far beyond what a softmax over 10⁴ steps needs, far below float32's limit.
_MAX_SCORE = 30.0


def _clamped(x: torch.Tensor) -> torch.Tensor:
    return x.clamp(-_MAX_SCORE, _MAX_SCORE)


def attention_network(
    input_size: int = 2, hidden_size: int = 100, score: str = "tanh", dropout: float = 0.0
) -> fb.Block:
    """A sequence of ``input_size``-vectors (or an object with ``.inputs``) → one prediction."""
    if score not in ("tanh", "linear"):
        raise ValueError(f"score must be 'tanh' or 'linear', got {score!r}")
    a = (
        fb.FC(1, activation=torch.tanh)
        if score == "tanh"
        else fb.FC(1, activation=None) >> fb.Function(_clamped)
    )

    def steps(example: Any) -> Any:
        return example.inputs if hasattr(example, "inputs") else example

    keep = 1.0 - dropout if dropout else None
    return (
        fb.InputTransform(steps)
        >> fb.Map(fb.Vector(input_size) >> fb.FC(hidden_size))
        >> feed_forward_attention(a)
        >> fb.FC(hidden_size, input_keep_prob=keep)
        >> fb.FC(1, activation=None)
    )


@dataclass
class SequenceBatch:
    """A collated batch: the schedule and the targets ``(B,)``."""

    plan: Plan
    targets: torch.Tensor
    size: int


class AttentionRegressor(nn.Module):
    """Feed-forward attention regressing one number from a sequence.

    Args:
        input_size: features per step (2: value and marker).
        hidden_size: units of the FC layers before and after the attention.
        score: ``tanh`` (Raffel & Ellis) or ``linear`` attention scores.
        dropout: on the attention's output.
        tolerance: a prediction within this of the target counts as correct.
    """

    def __init__(
        self,
        input_size: int = 2,
        hidden_size: int = 100,
        score: str = "tanh",
        dropout: float = 0.0,
        tolerance: float = 0.04,
        name: str = "ff_attention",
    ) -> None:
        super().__init__()
        self.tolerance = tolerance
        # Examples are immutable and recur every epoch: trace each sequence once.
        self.compiler = Compiler(
            attention_network(input_size, hidden_size, score, dropout), cache_traces=True
        )

    def collate(self, examples: Sequence[Any]) -> SequenceBatch:
        """Traces and schedules a batch (safe to call in DataLoader workers)."""
        targets = torch.tensor([float(e.target) for e in examples], dtype=torch.float32)
        return SequenceBatch(self.compiler.build(examples), targets, len(examples))

    def forward(self, batch: SequenceBatch) -> dict[str, torch.Tensor]:
        """Mean squared error; summed squared error and the count within ``tolerance``."""
        pred = self.compiler.run(batch.plan).squeeze(1)
        targets = batch.targets.to(pred.device)
        loss = ((pred - targets) ** 2).mean()
        # Statistics as tensors on the model's device (the trainer reads them back when it
        # reads the loss, not at every step); the count within the tolerance compares in
        # float64, as ``accuracy_within`` does.
        error = (pred.detach().double() - targets.double()).abs()
        return {
            "loss": loss,
            "sq_error": ((pred.detach() - targets) ** 2).sum(),
            "within": (error < self.tolerance).sum().to(torch.float32),
            "count": torch.tensor(float(batch.size), device=pred.device),
        }

    @staticmethod
    def summarize(sums: dict[str, float]) -> dict[str, float]:
        """MSE and accuracy (fraction within the tolerance)."""
        n = max(1.0, sums["count"])
        return {"mse": sums["sq_error"] / n, "accuracy": sums["within"] / n}
