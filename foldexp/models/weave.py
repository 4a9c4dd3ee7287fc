"""Weave graph convolution (Kearnes et al. 2016; the Fold paper's Appendix B) for molecules.

A molecule is ``(atoms, pairs)``: a sequence of N atom feature vectors and an N × N nested
sequence of pair feature vectors (``foldexp.data.MoleculeGraph``). ``weave_layer`` is the paper's
weave module (``foldexp.models.paper.weave_module``, reused as is) or, for the last layer of a
stack, its atom half only (``weave_atoms``): the last layer's pair update would feed nothing,
and pairs are most of the work (N² per molecule against N). ``weave_network`` stacks layers,
maps every atom through ``FC(graph_size, tanh)``, pools over atoms (sum or mean) and reads out
with an MLP.

``WeaveRegressor`` is the trainable model: targets standardised with the training split's mean
and standard deviation (``bundle.info``), a masked mean-squared-error loss (missing targets carry
no loss), and RMSE / MAE reported in the targets' original units.
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
from foldexp.models.paper import weave_module

__all__ = [
    "molecule_input",
    "weave_atoms",
    "weave_layer",
    "weave_network",
    "WeaveRegressor",
    "MoleculeBatch",
]


def molecule_input(atom_features: int, pair_features: int) -> fb.Block:
    """A ``MoleculeGraph`` (or an ``(atoms, pairs)`` pair of arrays) → the weave's input type."""

    def arrays(mol: Any) -> Any:
        return (mol.atom_features, mol.pair_features) if hasattr(mol, "pair_features") else mol

    return fb.InputTransform(arrays) >> fb.Record(
        (fb.Map(fb.Vector(atom_features)), fb.Map(fb.Map(fb.Vector(pair_features))))
    )


def weave_atoms(f_a_a: Any, f_p_a: Any, f_a: Any) -> fb.Composition:
    """The atom half of Appendix B's weave module: ``(atoms, pairs) → atoms``.

    The same blocks as the paper's listing (``a_to_a``, ``p_to_a``, ``a_y``), without the pair
    update: it outputs exactly ``weave_module(f_a_a, f_p_a, f_a, ...)``'s atoms.
    """
    atoms_only = fb.Composition()
    with atoms_only.scope():
        a_x, p_x = atoms_only.input[0], atoms_only.input[1]
        a_to_a = fb.Map(f_a_a).reads(a_x)
        p_to_a = fb.Map(fb.Map(f_p_a) >> fb.Sum()).reads(p_x)
        a_y = fb.ZipWith(fb.Concat() >> f_a).reads(a_to_a, p_to_a)
        atoms_only.output.reads(a_y)
    return atoms_only


def weave_layer(atom_size: int, pair_size: int, update_pairs: bool = True) -> fb.Block:
    """One weave module with ReLU FC layers: ``(atoms, pairs) → (atoms, pairs)``.

    With ``update_pairs=False`` only the atom half runs (:func:`weave_atoms`) and the layer
    outputs the atom sequence alone (for the last layer of a stack).
    """
    f_a_a, f_p_a, f_a = fb.FC(atom_size), fb.FC(atom_size), fb.FC(atom_size)
    if update_pairs:
        return weave_module(f_a_a, f_p_a, f_a, fb.FC(pair_size), fb.FC(pair_size), fb.FC(pair_size))
    return weave_atoms(f_a_a, f_p_a, f_a)


def weave_network(
    atom_features: int,
    pair_features: int,
    num_targets: int,
    layers: int = 2,
    atom_size: int = 50,
    pair_size: int = 50,
    graph_size: int = 128,
    mlp_size: int = 128,
    pool: str = "sum",
    dropout: float = 0.0,
) -> fb.Block:
    """A molecule → ``num_targets`` predictions: stacked weave layers, per-atom FC, pooling, MLP."""
    if layers < 1:
        raise ValueError(f"a weave network needs at least one layer, got layers={layers}")
    pool = str(getattr(pool, "value", pool))
    if pool not in ("sum", "mean"):
        raise ValueError(f"pool must be 'sum' or 'mean', got {pool!r}")
    net = molecule_input(atom_features, pair_features)
    for k in range(layers):
        net = net >> weave_layer(atom_size, pair_size, update_pairs=k < layers - 1)
    keep = 1.0 - dropout if dropout else None
    return (
        net
        >> fb.Map(fb.FC(graph_size, activation=torch.tanh))
        >> (fb.Sum() if pool == "sum" else fb.Mean())
        >> fb.FC(mlp_size, input_keep_prob=keep)
        >> fb.FC(num_targets, activation=None, input_keep_prob=keep)
    )


@dataclass
class MoleculeBatch:
    """A collated batch: the schedule, the raw targets ``(B, T)`` and their mask."""

    plan: Plan
    targets: torch.Tensor
    mask: torch.Tensor
    size: int


class WeaveRegressor(nn.Module):
    """Weave graph convolution regressing molecular properties (ESOL, FreeSolv).

    Args:
        atom_features, pair_features, num_targets: sizes (from ``bundle.info``).
        target_mean, target_std: per-target statistics of the training split; the network
            predicts standardised targets and metrics are reported in original units.
        layers, atom_size, pair_size, graph_size, mlp_size, pool, dropout: see
            :func:`weave_network`.
    """

    def __init__(
        self,
        atom_features: int,
        pair_features: int,
        num_targets: int = 1,
        target_mean: Sequence[float] | None = None,
        target_std: Sequence[float] | None = None,
        layers: int = 2,
        atom_size: int = 50,
        pair_size: int = 50,
        graph_size: int = 128,
        mlp_size: int = 128,
        pool: str = "sum",
        dropout: float = 0.0,
        name: str = "weave",
    ) -> None:
        super().__init__()
        net = weave_network(
            atom_features,
            pair_features,
            num_targets,
            layers,
            atom_size,
            pair_size,
            graph_size,
            mlp_size,
            pool,
            dropout,
        )
        # Molecules are immutable and recur every epoch: trace each one once.
        self.compiler = Compiler(net, cache_traces=True)
        mean = torch.zeros(num_targets) if target_mean is None else torch.tensor(target_mean)
        std = torch.ones(num_targets) if target_std is None else torch.tensor(target_std)
        # Buffers: saved in checkpoints with the weights, moved with the model.
        self.register_buffer("target_mean", mean.float().reshape(num_targets))
        self.register_buffer("target_std", std.float().reshape(num_targets))

    def collate(self, molecules: Sequence[Any]) -> MoleculeBatch:
        """Traces and schedules a batch (safe to call in DataLoader workers)."""
        targets = torch.stack([torch.as_tensor(m.targets, dtype=torch.float32) for m in molecules])
        mask = torch.stack([torch.as_tensor(m.target_mask, dtype=torch.bool) for m in molecules])
        return MoleculeBatch(self.compiler.build(molecules), targets, mask, len(molecules))

    def predict(self, batch: MoleculeBatch) -> torch.Tensor:
        """Predictions in the targets' original units, ``(B, T)``."""
        return self.compiler.run(batch.plan) * self.target_std + self.target_mean

    def forward(self, batch: MoleculeBatch) -> dict[str, torch.Tensor]:
        """Masked MSE on standardised targets; squared and absolute errors in original units."""
        z = self.compiler.run(batch.plan)
        targets = batch.targets.to(z.device)
        mask = batch.mask.to(z.device)
        z_target = (targets - self.target_mean) / self.target_std
        # Missing targets are stored as 0: where() keeps them (and their gradients) out.
        sq = torch.where(mask, (z - z_target) ** 2, torch.zeros_like(z))
        loss = sq.sum() / mask.sum().clamp(min=1)
        err = torch.where(mask, (z - z_target) * self.target_std, torch.zeros_like(z)).detach()
        return {
            "loss": loss,
            "sq_error": (err**2).sum(),
            "abs_error": err.abs().sum(),
            "count": mask.sum(),
        }

    @staticmethod
    def summarize(sums: dict[str, float]) -> dict[str, float]:
        """RMSE and MAE over every labelled target, in original units."""
        n = max(1.0, sums["count"])
        return {"rmse": (sums["sq_error"] / n) ** 0.5, "mae": sums["abs_error"] / n}
