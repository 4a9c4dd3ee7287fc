"""Molecule-level features joined to a molecule model's readout (``dataset.features``,
``dataset.feature_columns``; ``foldexp.data.mol_features`` computes them).

A molecule's features arrive raw (``MoleculeGraph.features``, NaN where RDKit gave no finite
value); the model standardises them with the training split's mean and standard deviation,
which it holds as buffers (``feature_mean``, ``feature_std``: saved in ``best.pt``, so
``predict``, ``eval`` and ``fingerprint`` apply the same statistics to new molecules), puts 0
(the training mean) where a value is missing, clips them to ``±feature_clip`` standard
deviations (``dataset.feature_clip``, 10 by default: one descriptor of a molecule far outside
the training range, such as RDKit's Kappa3 of isopropanol at 350, would otherwise swamp the
head), and concatenates them to the readout before the head, as chemprop v2 joins its extra
descriptors: the head's input grows by ``F``. A model without features has no buffers and its
head is unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

__all__ = ["batch_features", "init_features", "join_features", "mlp_head"]


def init_features(
    model: nn.Module, feature_mean: Sequence[float] | None, feature_std: Sequence[float] | None
) -> int:
    """Registers the features' statistics on ``model`` (``feature_size`` = ``F``, 0 without
    features) and returns ``F``."""
    mean = [] if feature_mean is None else list(feature_mean)
    std = [] if feature_std is None else list(feature_std)
    if len(mean) != len(std):
        raise ValueError(f"feature_mean holds {len(mean)} values, feature_std {len(std)}")
    model.feature_size = len(mean)
    if mean:
        model.register_buffer("feature_mean", torch.tensor(mean, dtype=torch.float32))
        model.register_buffer("feature_std", torch.tensor(std, dtype=torch.float32))
    return len(mean)


def batch_features(molecules: Sequence[Any]) -> torch.Tensor | None:
    """``(M, F)`` raw features of a batch's molecules, ``None`` when they carry none."""
    if getattr(molecules[0], "features", None) is None:
        return None
    return torch.from_numpy(np.stack([m.features for m in molecules]).astype(np.float32))


def join_features(
    model: nn.Module, readout: torch.Tensor, features: torch.Tensor | None
) -> torch.Tensor:
    """``(M, D + F)``: ``readout`` then the standardised features (0 where not finite, within
    ``±model.feature_clip`` unless it is ``None``); the readout itself without features."""
    size = getattr(model, "feature_size", 0)
    if not size:
        return readout
    if features is None or features.shape[-1] != size:
        got = "none" if features is None else features.shape[-1]
        raise ValueError(
            f"the model was trained with {size} molecule features (dataset.features, "
            f"dataset.feature_columns); the batch has {got}"
        )
    x = features.to(readout.device, readout.dtype)
    z = (x - model.feature_mean) / model.feature_std
    # missing (x not finite): the training mean; a finite x far out may overflow z to ±inf,
    # which the clip bounds like any other far value (it is not missing)
    z = torch.where(torch.isfinite(x), z, torch.zeros_like(z)).nan_to_num(nan=0.0)
    clip = getattr(model, "feature_clip", None)
    return torch.cat([readout, z if clip is None else z.clamp(-clip, clip)], 1)


def mlp_head(
    readout: int, features: int, hidden: int, outputs: int, dropout: float
) -> nn.Sequential | None:
    """The weave network's read-out MLP in torch (``FC(hidden)`` ReLU, ``FC(outputs)``, dropout
    on each one's input) over the readout joined to ``features`` values; ``None`` without
    features (the weave network keeps its own MLP, ``weave_network(head=True)``)."""
    if not features:
        return None
    return nn.Sequential(
        nn.Dropout(dropout),
        nn.Linear(readout + features, hidden),
        nn.ReLU(),
        nn.Dropout(dropout),
        nn.Linear(hidden, outputs),
    )
