"""Evaluation and model selection for the training loop (``loop.py``).

``evaluate`` runs a split without gradients and turns the model's summed statistics into
metrics named ``<split>_<metric>`` (the ``metrics.csv`` columns); under DDP every rank evaluates
its shard of each batch and the sums are gathered. ``improves`` decides whether an epoch's dev
row is the best so far by ``trainer.select_metric``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from foldexp.config import enum_value as plain
from foldexp.config.settings import TrainerSettings
from foldexp.train import distributed as dd
from foldexp.train.loaders import RunLoaders
from foldexp.train.loggers import progress_bar
from foldexp.train.sampler import ShardedBatchSampler

__all__ = ["evaluate", "improves"]

# Batches whose statistics are read back together (``distributed.read_scalars``).
BATCHES_PER_READ = 16


def evaluate(
    model: Any,
    examples: list[Any],
    tc: TrainerSettings,
    device: torch.device,
    prefix: str,
    ctx: dd.DistContext | None = None,
    sizes: list[int] | None = None,
    loaders: RunLoaders | None = None,
) -> dict[str, float]:
    """Mean loss and the model's metrics over ``examples``, without gradients.

    Under DDP each rank evaluates its shard of every batch and the sums are gathered.
    ``loaders`` keeps the split's loader (and its workers) from one call to the next.
    """
    ctx = ctx or dd.DistContext()
    model.eval()
    sums: dict[str, float] = {}
    n = 0
    sampler = ShardedBatchSampler(
        range(len(examples)),
        tc.eval_batch_size,
        sizes or [1] * len(examples),
        ctx.rank,
        ctx.world_size,
        plain(tc.balance),
        limit=tc.limit_batches,
        pad=False,
    )
    loaders = loaders or RunLoaders(model, tc.num_workers, 0)
    loader = loaders.get(prefix, examples, sampler)
    pending: list[tuple[dict[str, Any], int]] = []

    def read() -> None:  # a few batches' statistics in one wait for the device
        for out, (_, size) in zip(dd.read_scalars([o for o, _ in pending]), pending):
            dd.accumulate(sums, out, size)
        pending.clear()

    with torch.no_grad():
        for batch in progress_bar(loader, tc.progress and ctx.is_main, desc=prefix):
            pending.append((model(batch), batch.size))
            n += batch.size
            if len(pending) >= BATCHES_PER_READ:
                read()
        read()
    if ctx.enabled:
        sums, n = dd.merge(dd.all_gather(ctx, (sums, n)))
    metrics = {"loss": sums.get("loss", 0.0) / max(1, n), **model.summarize(sums)}
    return {f"{prefix}_{k}": v for k, v in metrics.items()}


def improves(
    row: dict[str, Any],
    select: str,
    better: Callable[[float, float], float],
    progress: dict[str, Any],
    epoch: int,
) -> bool:
    """Whether ``row[select]`` beats the best so far; if so, records it as the best epoch.

    ``better`` is ``max`` or ``min``; a tie keeps the earlier epoch. A NaN score (a diverged
    model) never improves, and any number beats a NaN best: ``max(nan, x)`` is ``nan``, so
    without this a diverged epoch became the best and its weights replaced ``best.pt``. Only
    the first epoch's NaN is kept, as a best that any number beats: a run whose every dev
    score is NaN still has a ``best.pt`` to test (its ``best_*`` says NaN).
    """
    if select not in row:
        raise KeyError(
            f"trainer.select_metric={select!r} is not a metrics.csv column; "
            f"columns are {sorted(row)}"
        )
    score, best = row[select], progress["best"]
    if math.isnan(score) and best is not None:
        return False
    if best is not None and not math.isnan(best) and better(score, best) == best:
        return False
    progress.update(best=score, best_epoch=epoch, bad_epochs=0)
    return True
