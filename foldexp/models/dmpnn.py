"""chemprop's directed message passing network (D-MPNN; Yang et al. 2019, "Analyzing Learned
Molecular Representations for Property Prediction") for molecules: ``model=dmpnn``.

Messages live on directed bonds. With ``x_v`` an atom's features and ``e_vw`` a bond's (the pair
features of ``foldexp.data.featurize`` for the bonded pair ``v, w``):

- ``h⁰_vw = ReLU(W_i [x_v, e_vw])``;
- for ``t = 1 … depth-1``: ``m_vw = Σ_{k ∈ N(v) \\ w} h_kv`` (the bonds into ``v`` but the
  reverse of ``v→w``), ``h_vw = ReLU(h⁰_vw + W_h m_vw)``;
- atoms: ``h_v = ReLU(W_o [x_v, Σ_{w ∈ N(v)} h_wv])``; the molecule: ``Σ_v h_v``; then a
  feed-forward read-out of ``ffn_layers`` layers.

chemprop's defaults: ``hidden_size`` 300, ``depth`` 3, ``W_i`` and ``W_h`` without bias, a
two-layer read-out of width ``hidden_size``. A batch is one graph of all its molecules' directed
bonds (``collate``: the source atom, the target atom and the reverse bond of each, numbered
across the batch), so each step is three tensor operations for the whole batch; a molecule's
outputs do not depend on the batch it is in (``tests/unit/train/test_dmpnn.py`` checks batched
against one molecule at a time, values and gradients). The task, losses and metrics are the
weave model's (``weave.MoleculeTaskModel``): regression in the targets' units, or multi-task
0/1 classification.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from foldexp.models.extra_features import batch_features, init_features, join_features
from foldexp.models.molecule_sets import collate_sets, column_encoders, molecules_of
from foldexp.models.transfer import check_freeze, load_encoder
from foldexp.models.transfer import freeze as freeze_encoder
from foldexp.models.weave import MoleculeTaskModel

__all__ = ["DMPNNModel", "BondGraph", "directed_bonds", "BOND_TYPE_COLUMNS"]

#: The pair-feature columns of a bond type (single, double, triple, aromatic, other:
#: ``foldexp.data.featurize.PAIR_FEATURE_NAMES`` 1..5; column 0 is "no bond"). Two atoms are
#: bonded when one of them is set.
BOND_TYPE_COLUMNS = slice(1, 6)
#: The encoder's modules (message passing); ``ffn`` is the head.
ENCODER = ("w_i", "w_h", "w_o", "column_encoders")  # the last: other SMILES columns' own
log = logging.getLogger(__name__)


def directed_bonds(pair_features: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A molecule's directed bonds: ``(source, target, reverse)``, each ``(B,)``; bond ``k``
    goes ``source[k] → target[k]`` and ``reverse[k]`` is the index of ``target[k] → source[k]``."""
    bonded = np.asarray(pair_features)[:, :, BOND_TYPE_COLUMNS].any(-1)
    np.fill_diagonal(bonded, False)
    source, target = np.nonzero(bonded | bonded.T)  # row-major: each pair both ways
    index = {(int(s), int(t)): k for k, (s, t) in enumerate(zip(source, target, strict=True))}
    reverse = np.array([index[(int(t), int(s))] for s, t in zip(source, target, strict=True)])
    return source.astype(np.int64), target.astype(np.int64), reverse.astype(np.int64)


@dataclass
class BondGraph:
    """A collated batch: every molecule's atoms and directed bonds, numbered across the batch."""

    atoms: torch.Tensor  # (N, atom_features)
    bonds: torch.Tensor  # (B, atom_features + pair_features): [x_source, e_source→target]
    source: torch.Tensor  # (B,) atom each bond leaves
    target: torch.Tensor  # (B,) atom each bond enters
    reverse: torch.Tensor  # (B,) the bond going the other way
    molecule: torch.Tensor  # (N,) molecule of each atom
    targets: torch.Tensor  # (M, T)
    mask: torch.Tensor  # (M, T)
    size: int  # M molecules
    features: torch.Tensor | None = None  # (M, F) raw molecule features (dataset.features)


def _bond_graph(molecules: Sequence[Any]) -> BondGraph:
    atoms, bonds, source, target, reverse, molecule = [], [], [], [], [], []
    n_atoms = n_bonds = 0
    for m, mol in enumerate(molecules):
        x = np.asarray(mol.atom_features, dtype=np.float32)
        pairs = np.asarray(mol.pair_features, dtype=np.float32)
        s, t, r = directed_bonds(pairs)
        atoms.append(x)
        bonds.append(np.concatenate([x[s], pairs[s, t]], axis=1))
        source.append(s + n_atoms)
        target.append(t + n_atoms)
        reverse.append(r + n_bonds)
        molecule.append(np.full(len(x), m, dtype=np.int64))
        n_atoms, n_bonds = n_atoms + len(x), n_bonds + len(s)
    width = atoms[0].shape[1] + molecules[0].pair_features.shape[2]
    targets = torch.stack([torch.as_tensor(m.targets, dtype=torch.float32) for m in molecules])
    mask = torch.stack([torch.as_tensor(m.target_mask, dtype=torch.bool) for m in molecules])
    return BondGraph(
        atoms=torch.from_numpy(np.concatenate(atoms)),
        bonds=torch.from_numpy(np.concatenate(bonds).reshape(-1, width)),
        source=torch.from_numpy(np.concatenate(source)),
        target=torch.from_numpy(np.concatenate(target)),
        reverse=torch.from_numpy(np.concatenate(reverse)),
        molecule=torch.from_numpy(np.concatenate(molecule)),
        targets=targets,
        mask=mask,
        size=len(molecules),
        features=batch_features(molecules),
    )


def _copy_shape(layer: nn.Linear) -> nn.Linear:
    """A new linear layer of ``layer``'s shape (and bias or none), freshly initialised."""
    return nn.Linear(layer.in_features, layer.out_features, bias=layer.bias is not None)


def _into(index: torch.Tensor, values: torch.Tensor, rows: int) -> torch.Tensor:
    """``out[i] = Σ_{k: index[k] = i} values[k]`` for ``rows`` rows."""
    out = values.new_zeros(rows, values.shape[1])
    return out.index_add(0, index, values)


class DMPNNModel(MoleculeTaskModel):
    """D-MPNN predicting molecular properties: regression or (multi-task) classification.

    Args:
        atom_features, pair_features, num_targets: sizes (from ``bundle.info``).
        target_mean, target_std, task, target_names, pos_weight: as ``WeaveModel``'s.
        hidden_size: the bond and atom state width (chemprop: 300).
        depth: message-passing steps, the first included (chemprop: 3).
        ffn_layers: read-out layers after the sum over atoms, the last one to the targets.
        dropout: on the bond states after each step, the atom states and the read-out's inputs.
        uncertainty, evidential_weight, temperature: as ``WeaveModel``'s.
        init_from, freeze: a trained run whose encoder starts this one; ``encoder``: train the
            head only (``foldexp.models.transfer``).
        feature_mean, feature_std, feature_clip: molecule features joined to the readout, the
            FFN's input ``hidden_size + F`` wide (``foldexp.models.extra_features``).
        molecules, shared_encoder: molecules an example (``info``: SMILES columns a row), each
            encoded, the readouts concatenated (``molecules × hidden_size`` before the FFN);
            one encoder for all, or one a column (``foldexp.models.molecule_sets``).
    """

    def __init__(
        self,
        atom_features: int,
        pair_features: int,
        num_targets: int = 1,
        target_mean: Sequence[float] | None = None,
        target_std: Sequence[float] | None = None,
        hidden_size: int = 300,
        depth: int = 3,
        ffn_layers: int = 2,
        dropout: float = 0.0,
        name: str = "dmpnn",
        task: str = "regression",
        target_names: Sequence[str] | None = None,
        pos_weight: Sequence[float] | None = None,
        uncertainty: str = "none",
        evidential_weight: float = 0.2,
        temperature: str = "none",
        init_from: str | None = None,
        freeze: str = "none",
        feature_mean: Sequence[float] | None = None,
        feature_std: Sequence[float] | None = None,
        feature_clip: float | None = None,
        molecules: int = 1,
        shared_encoder: bool = False,
    ) -> None:
        super().__init__()
        self.feature_clip = feature_clip  # standardised features within ±this (None: unclipped)
        if depth < 1 or ffn_layers < 1:
            raise ValueError(f"depth and ffn_layers must be >= 1, got {depth}, {ffn_layers}")
        heads = (uncertainty, evidential_weight, temperature)
        self._init_targets(
            num_targets, target_mean, target_std, task, target_names, pos_weight, *heads
        )
        self.depth = depth
        self.molecules = molecules
        self.readout_size = hidden_size * molecules  # the readouts side by side
        self.w_i = nn.Linear(atom_features + pair_features, hidden_size, bias=False)
        self.w_h = nn.Linear(hidden_size, hidden_size, bias=False)
        self.w_o = nn.Linear(atom_features + hidden_size, hidden_size)

        def encoder() -> nn.ModuleDict:  # another column's: the same shapes as the first's
            return nn.ModuleDict({k: _copy_shape(getattr(self, k)) for k in ENCODER[:3]})

        self.column_encoders = column_encoders(molecules, shared_encoder, encoder)
        self.dropout = nn.Dropout(dropout)
        width = self.readout_size + init_features(self, feature_mean, feature_std)  # FFN's input
        self.encode_size = width  # encode()'s width: fingerprint's columns
        layers: list[nn.Module] = []
        for k in range(ffn_layers - 1):
            wide = width if k == 0 else hidden_size
            layers += [nn.Dropout(dropout), nn.Linear(wide, hidden_size), nn.ReLU()]
        head = nn.Linear(width if ffn_layers == 1 else hidden_size, self.head_width)
        self.ffn = nn.Sequential(*layers, nn.Dropout(dropout), head)
        self.init_from = init_from  # read by prepare_training (a fresh or resumed run only)
        if check_freeze(freeze, init_from) == "encoder":
            freeze_encoder(self, ENCODER)

    def prepare_training(self, setup: Any) -> None:
        """``model.init_from``: the encoder from a trained run (``foldexp.models.transfer``)."""
        if self.init_from:
            where = f"model.init_from={self.init_from}"
            copied = load_encoder(self, setup.trained_model(self.init_from), ENCODER, where)
            log.info("%s: the encoder's %d weights start from that run", where, copied)

    def collate(self, molecules: Sequence[Any]) -> Any:
        """The batch's bond graph (numpy and index arithmetic only: safe in DataLoader workers);
        with several molecules an example, one a column (``molecule_sets.SetBatch``)."""
        sets = collate_sets(molecules, _bond_graph, self.molecules)
        return _bond_graph(molecules) if sets is None else sets

    def example_size(self, molecule: Any) -> int:
        """The work of one example (balances DDP shards): its molecules' atoms."""
        return sum(int(m.atom_features.shape[0]) for m in molecules_of(molecule))

    def encode(self, graph: Any) -> torch.Tensor:
        """``(M, encode_size)``: the FFN's input, :meth:`readout` then the standardised
        molecule features (``dataset.features``; ``foldexp.models.extra_features``)."""
        return join_features(self, self.readout(graph), getattr(graph, "features", None))

    def readout(self, graph: Any) -> torch.Tensor:
        """``(M, molecules × hidden_size)``: each molecule's sum of atom states, the columns'
        side by side (each column through its encoder)."""
        if self.molecules == 1:
            return self._encode(graph, self.w_i, self.w_h, self.w_o)
        encoders = [{k: getattr(self, k) for k in ENCODER[:3]}, *(self.column_encoders or ())]
        encoders += [encoders[0]] * (self.molecules - len(encoders))  # shared: the first's
        return torch.cat(
            [self._encode(p, e["w_i"], e["w_h"], e["w_o"]) for p, e in zip(graph.parts, encoders)],
            1,
        )

    def _encode(self, graph: BondGraph, w_i: nn.Module, w_h: nn.Module, w_o: nn.Module) -> Any:
        """``(M, hidden_size)``: one batch of molecules through one encoder."""
        device, dtype = w_i.weight.device, w_i.weight.dtype
        atoms, bonds = graph.atoms.to(device, dtype), graph.bonds.to(device, dtype)
        source, target = graph.source.to(device), graph.target.to(device)
        reverse = graph.reverse.to(device)
        start = torch.relu(w_i(bonds))
        h = start
        for _ in range(self.depth - 1):
            into_atom = _into(target, h, len(atoms))  # Σ of the bonds entering each atom
            message = into_atom[source] - h[reverse]  # ... entering v, but w→v
            h = self.dropout(torch.relu(start + w_h(message)))
        atom_h = torch.relu(w_o(torch.cat([atoms, _into(target, h, len(atoms))], 1)))
        atom_h = self.dropout(atom_h)
        return _into(graph.molecule.to(device), atom_h, graph.size)

    def _outputs(self, batch: BondGraph) -> torch.Tensor:
        return self.ffn(self.encode(batch))
