"""Checkpoints: model, optimizer, position and every RNG, saved atomically, loaded safely.

``last.pt`` is rewritten at every epoch end (and every ``checkpoint_every`` steps); ``best.pt``
when the selection metric improves. Loading uses ``torch.load(weights_only=True)``: checkpoints
hold only tensors and plain Python containers, never pickled objects.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from foldexp.train.artifacts import atomic_write

__all__ = ["save_checkpoint", "load_checkpoint", "rng_state", "set_rng_state", "seed_everything"]


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state() -> dict[str, Any]:
    """Python, numpy and torch RNG states in weights-only-loadable form."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": [kind, torch.from_numpy(np.asarray(keys, dtype=np.int64)), pos, has_gauss, cached],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(
    path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, progress: dict[str, Any]
) -> Path:
    """Writes model, optimizer, training position and RNG states to ``path`` atomically."""
    payload = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "progress": progress,
        "rng": rng_state(),
    }
    return atomic_write(path, lambda tmp: torch.save(payload, tmp))


def load_checkpoint(
    path: Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    restore_rng: bool = True,
) -> dict[str, Any]:
    """Restores what ``save_checkpoint`` wrote; returns the saved training position."""
    payload = torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(payload["model"])
    if optimizer is not None:
        optimizer.load_state_dict(payload["optimizer"])
    if restore_rng:
        set_rng_state(payload["rng"])
    return payload["progress"]
