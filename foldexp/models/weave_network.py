"""The weave network's blocks (Kearnes et al. 2016; the Fold paper's Appendix B): a molecule's
input type, the weave layer (the paper's ``weave_module``, or its atom half for a stack's last
layer) and the whole network, pooled readout and MLP; ``foldexp.models.weave`` trains it.
"""

from __future__ import annotations

from typing import Any

import torch

import foldexp.blocks as fb
from foldexp.models.paper import weave_module

__all__ = ["molecule_input", "weave_atoms", "weave_head", "weave_layer", "weave_network"]


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
    head: bool = True,
) -> fb.Block:
    """A molecule → ``num_targets`` predictions: stacked weave layers, per-atom FC, pooling, MLP
    (``head=False``: the pooled readout, without the MLP)."""
    if layers < 1:
        raise ValueError(f"a weave network needs at least one layer, got layers={layers}")
    if pool not in ("sum", "mean"):
        raise ValueError(f"pool must be 'sum' or 'mean', got {pool!r}")
    net = molecule_input(atom_features, pair_features)
    for k in range(layers):
        net = net >> weave_layer(atom_size, pair_size, update_pairs=k < layers - 1)
    net = net >> fb.Map(fb.FC(graph_size, activation=torch.tanh))
    net = net >> (fb.Sum() if pool == "sum" else fb.Mean())
    return (net >> weave_head(num_targets, mlp_size, dropout)) if head else net


def weave_head(num_targets: int, mlp_size: int = 128, dropout: float = 0.0) -> fb.Block:
    """The read-out MLP after pooling: ``FC(mlp_size)`` ReLU, ``FC(num_targets)``, dropout on
    each one's input. ``readout >> weave_head(...)`` is :func:`weave_network`'s pipe, block for
    block (a pipe flattens), so a model may keep the readout alone to compile apart
    (``WeaveModel.encode``) with the same parameters."""
    keep = 1.0 - dropout if dropout else None
    mlp = fb.FC(mlp_size, input_keep_prob=keep)
    return fb.Pipe(mlp, fb.FC(num_targets, activation=None, input_keep_prob=keep))
