"""Transfer learning for molecule models: ``model.init_from=RUN_DIR`` and ``model.freeze``.

``model.init_from`` starts a model's encoder (for D-MPNN: ``w_i``, ``w_h``, ``w_o``, the
message passing before the read-out; for weave: its network up to the pooled readout,
``foldexp.models.weave_encode``) from a trained run's best weights; the head is built
afresh for this run's targets, and the target statistics are this run's. The run is loaded as
``foldexp predict`` loads one (``TrainingSetup.trained_model``: checksums, registered targets,
its weights against its own config), and its encoder must be the same model's with the same
shapes: another model, another ``hidden_size`` or another featuriser is refused in one line
naming the parameter and both shapes. ``model.freeze=encoder`` then trains the head alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["FREEZE", "check_freeze", "freeze", "load_encoder"]

FREEZE = ("none", "encoder")


def check_freeze(value: Any, init_from: str | None) -> str:
    """``model.freeze`` as a plain string; ``encoder`` needs ``model.init_from``."""
    value = str(getattr(value, "value", value))
    if value not in FREEZE:
        raise ValueError(f"model.freeze={value}; expected one of {', '.join(FREEZE)}")
    if value == "encoder" and not init_from:
        raise ValueError(
            "model.freeze=encoder keeps the encoder as it starts: it needs model.init_from=RUN_DIR "
            "(a trained run whose encoder to keep)"
        )
    return value


def _is_encoder(name: str, prefixes: Sequence[str]) -> bool:
    """Whether ``name`` is under one of ``prefixes`` (a module's dotted path: ``w_i``,
    ``compiler.layers.3``)."""
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def freeze(model: torch.nn.Module, prefixes: Sequence[str]) -> None:
    """No gradient for the parameters under ``prefixes`` (the optimizer skips them)."""
    for name, p in model.named_parameters():
        if _is_encoder(name, prefixes):
            p.requires_grad_(False)


def load_encoder(
    model: torch.nn.Module,
    source: torch.nn.Module,
    prefixes: Sequence[str],
    where: str,
    shapes: str = "model.hidden_size, the atom and bond features",
) -> int:
    """Copies ``source``'s parameters under ``prefixes`` into ``model``; returns how many
    values were copied. ``where`` (``model.init_from=DIR``) starts every refusal; ``shapes``
    says what the shapes follow."""
    if type(source) is not type(model):
        raise ValueError(
            f"{where}: that run's model is {type(source).__name__}, this one {type(model).__name__}"
            "; an encoder starts the same model only"
        )
    theirs = source.state_dict()
    mine = {k: v for k, v in model.state_dict().items() if _is_encoder(k, prefixes)}
    for name, value in mine.items():
        if name not in theirs:
            raise ValueError(f"{where}: that run's encoder has no parameter {name}")
        if theirs[name].shape != value.shape:
            raise ValueError(
                f"{where}: that run's encoder does not fit: {name} is {list(theirs[name].shape)} "
                f"there, {list(value.shape)} here ({shapes})"
            )
    with torch.no_grad():
        for name, value in mine.items():
            value.copy_(theirs[name])
    return sum(v.numel() for v in mine.values())
