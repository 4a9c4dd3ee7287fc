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

__all__ = [
    "save_checkpoint",
    "load_checkpoint",
    "load_payload",
    "rng_state",
    "set_rng_state",
    "seed_everything",
]


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
    path: Path,
    model: torch.nn.Module,
    optimizer: Any,
    progress: dict[str, Any],
    states: dict[str, Any] | None = None,
) -> Path:
    """Writes model, optimizer, training position and RNG states to ``path`` atomically;
    ``states``: more named objects with ``state_dict()`` (e.g. the parameter average)."""
    payload = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "progress": progress,
        "rng": rng_state(),
        **{name: obj.state_dict() for name, obj in (states or {}).items()},
    }
    return atomic_write(path, lambda tmp: torch.save(payload, tmp))


def load_payload(
    path: Path,
    payload: dict[str, Any],
    model: torch.nn.Module,
    optimizer: Any = None,
    states: dict[str, Any] | None = None,
) -> None:
    """Puts a loaded checkpoint's model, optimizer and ``states`` back."""
    model.load_state_dict(payload["model"])
    if optimizer is not None:
        optimizer.load_state_dict(payload["optimizer"])
    for name, obj in (states or {}).items():
        if name not in payload:
            raise ValueError(
                f"{path} has no {name!r} state: it was written by a run configured without it"
            )
        obj.load_state_dict(payload[name])


def load_checkpoint(
    path: Path,
    model: torch.nn.Module,
    optimizer: Any = None,
    restore_rng: bool = True,
    states: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Restores what ``save_checkpoint`` wrote; returns the saved training position."""
    payload = torch.load(path, map_location="cpu", weights_only=True)
    load_payload(path, payload, model, optimizer, states)
    if restore_rng:
        set_rng_state(payload["rng"])
    return payload["progress"]
