"""The learning rate over a run's steps: a linear warm-up, then constant, linear or cosine decay.

``trainer.lr_schedule``, ``lr_warmup_steps`` and ``lr_min_ratio`` say the shape. It spans
``trainer.lr_decay_steps`` steps, or by default the run's length in optimizer steps:
``trainer.max_steps`` when set, else ``epochs`` times the batches of an epoch (``ceil(train
examples / batch_size)``, at most ``limit_batches``), as the sampler cuts them; steps past its
end take the floor. Before each step the schedule sets every parameter group's ``lr`` to the
group's own base rate (its ``initial_lr``, which the optimizer's state dict saves) times the
factor for that step.
The factor depends only on the step's number, so a resumed run takes exactly the rates the
uninterrupted run would have; no scheduler state needs saving. A run given more epochs on resume
(``trainer.epochs`` may change) stretches what is left of a default-length decay over the longer
run; with ``lr_decay_steps`` set it does not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from foldexp.config import enum_value as plain
from foldexp.config.errors import ConfigError

__all__ = ["LRScheduler", "lr_factor", "planned_steps"]


def planned_steps(
    n_train: int, batch_size: int, epochs: int, limit_batches: int = 0, max_steps: int = 0
) -> int:
    """The optimizer steps a run takes if nothing stops it early."""
    per_epoch = -(-n_train // batch_size)
    if limit_batches:
        per_epoch = min(per_epoch, limit_batches)
    total = epochs * per_epoch
    return min(total, max_steps) if max_steps else total


def lr_factor(step: int, total: int, shape: str, warmup: int = 0, min_ratio: float = 0.0) -> float:
    """The share of the base learning rate for step ``step`` (0 = the first) of ``total``.

    Warm-up steps ``0 .. warmup - 1`` rise linearly to 1 (``(step + 1) / warmup``); the decay
    then runs from 1 at step ``warmup`` to ``min_ratio`` at the last step, ``total - 1``."""
    if step < warmup:
        return (step + 1) / warmup
    if shape == "constant":
        return 1.0
    span = total - 1 - warmup
    t = 1.0 if span <= 0 else min(1.0, (step - warmup) / span)
    left = 1.0 - t if shape == "linear" else 0.5 * (1.0 + math.cos(math.pi * t))
    return min_ratio + (1.0 - min_ratio) * left


@dataclass(frozen=True)
class LRScheduler:
    """Sets each parameter group's learning rate before a step (``set_for``)."""

    shape: str
    warmup: int
    min_ratio: float
    total: int

    @classmethod
    def from_config(cls, trainer: Any, n_train: int) -> LRScheduler | None:
        """The run's schedule; ``None`` for a constant rate without warm-up, which leaves the
        optimizer's rates untouched. Warm-up as long as the run itself is refused: the rate
        would never reach ``optimizer.lr``."""
        shape = plain(trainer.lr_schedule)
        if shape == "constant" and not trainer.lr_warmup_steps:
            return None
        warmup, total = trainer.lr_warmup_steps, trainer.lr_decay_steps
        if total and warmup >= total:
            raise ConfigError(
                f"trainer.lr_warmup_steps={warmup}; expected fewer than "
                f"trainer.lr_decay_steps={total}"
            )
        if not total:
            total = planned_steps(
                n_train,
                trainer.batch_size,
                trainer.epochs,
                trainer.limit_batches,
                trainer.max_steps,
            )
        if warmup >= total:
            raise ConfigError(
                f"trainer.lr_warmup_steps={warmup}; expected fewer than the run's {total} "
                f"optimizer steps ({n_train} training examples in batches of "
                f"{trainer.batch_size}, {trainer.epochs} epoch(s)"
                + (f", trainer.max_steps={trainer.max_steps}" if trainer.max_steps else "")
                + ")"
            )
        return cls(shape, warmup, trainer.lr_min_ratio, total)

    def set_for(self, optimizer: Any, step: int) -> float:
        """Sets every group's ``lr`` for step ``step``; returns the factor."""
        factor = lr_factor(step, self.total, self.shape, self.warmup, self.min_ratio)
        for group in optimizer.param_groups:
            group["lr"] = group.setdefault("initial_lr", group["lr"]) * factor
        return factor
