"""Saving and restoring a run's position, on one process or several (``trainer.resume``).

A single process saves and loads ``checkpoint.py``'s payload as it is. Under DDP rank 0 alone
writes, but the payload carries every rank's RNG state (``rank_rng``) so each rank's dropout
stream continues where it stopped; on restore rank 0 reads the file and broadcasts it, so the
other ranks need no shared file system.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from foldexp.train import distributed as dd
from foldexp.train.checkpoint import (
    load_checkpoint,
    load_payload,
    rng_state,
    save_checkpoint,
    seed_everything,
    set_rng_state,
)

__all__ = ["restore_run", "save_run", "seed_rank"]


def save_run(
    ctx: dd.DistContext,
    path: Path,
    model: torch.nn.Module,
    optimizer: Any,
    progress: dict[str, Any],
    states: dict[str, Any],
) -> None:
    """Writes ``path`` atomically; under DDP every rank must call it (the RNGs are gathered)."""
    if not ctx.enabled:
        save_checkpoint(path, model, optimizer, progress, states)
        return
    rngs = dd.all_gather(ctx, rng_state())
    if ctx.is_main:
        save_checkpoint(path, model, optimizer, {**progress, "rank_rng": rngs}, states)


def restore_run(
    ctx: dd.DistContext,
    path: Path,
    model: torch.nn.Module,
    optimizer: Any,
    states: dict[str, Any],
) -> dict[str, Any] | None:
    """Loads ``path`` (model, optimizer, RNGs) if it exists; returns the saved progress.

    Each rank takes back its own RNG state; after a checkpoint from another number of
    processes the ranks above 0 keep their fresh seeds.
    """
    if not ctx.enabled:
        if not path.exists():
            return None
        progress = load_checkpoint(path, model, optimizer, states=states)
        progress.pop("rank_rng", None)
        return progress
    exists = ctx.is_main and path.exists()
    payload = torch.load(path, map_location="cpu", weights_only=True) if exists else None
    payload = dd.broadcast(ctx, payload)
    if payload is None:
        return None
    load_payload(path, payload, model, optimizer, states)
    progress = payload["progress"]
    rngs = progress.pop("rank_rng", None)
    if rngs and len(rngs) == ctx.world_size:
        set_rng_state(rngs[ctx.rank])
    elif not ctx.rank:
        set_rng_state(payload["rng"])
    return progress


def seed_rank(seed: int, rank: int) -> None:
    """Each rank its own dropout masks; rank 0 keeps the single-process stream."""
    seed_everything(int(np.random.SeedSequence([seed, rank]).generate_state(1)[0]))
