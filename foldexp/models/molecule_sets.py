"""Several molecules an example (``dataset.smiles_column=[solute, solvent]``), model side.

An example with ``molecules`` (``foldexp.data.molecule_sets.MoleculeSet``: one featurised
molecule a SMILES column, and the row's targets) is collated column by column into a
:class:`SetBatch`: each column's molecules one batch of the model's own kind. The model
encodes each column with its encoder (``model.shared_encoder=true``: one encoder for all the
columns; ``false``, as chemprop's default: one encoder a column) and concatenates the readouts,
column after column, before its head.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

__all__ = ["SetBatch", "collate_sets", "column_encoders", "molecules_of"]


@dataclass
class SetBatch:
    """A collated batch of examples of several molecules: one batch a column."""

    parts: list[Any]  # each column's molecules, collated as one molecule a row would be
    targets: torch.Tensor  # (M, T)
    mask: torch.Tensor  # (M, T)
    size: int  # M examples
    features: torch.Tensor | None = None  # molecule-level features are not read for sets


def molecules_of(example: Any) -> tuple[Any, ...]:
    """An example's molecules: its ``molecules``, or the example itself."""
    return tuple(getattr(example, "molecules", (example,)))


def collate_sets(
    examples: Sequence[Any], collate_one: Callable[[Sequence[Any]], Any], molecules: int
) -> Any | None:
    """``examples`` as a :class:`SetBatch` when the model reads ``molecules`` > 1 a row, else
    ``None`` (the caller collates one molecule a row).

    Raises:
        ValueError: an example holds another number of molecules than the model reads.
    """
    counts = {len(molecules_of(e)) for e in examples}
    if counts and counts != {molecules}:
        raise ValueError(
            f"the model reads {molecules} molecule(s) an example (dataset.smiles_column), got "
            f"examples of {sorted(counts)}"
        )
    if molecules == 1:
        return None
    parts = [collate_one([e.molecules[k] for e in examples]) for k in range(molecules)]
    targets = torch.stack([torch.as_tensor(e.targets, dtype=torch.float32) for e in examples])
    mask = torch.stack([torch.as_tensor(e.target_mask, dtype=torch.bool) for e in examples])
    return SetBatch(parts, targets, mask, len(examples))


def column_encoders(
    molecules: int, shared: bool, make: Callable[[], nn.ModuleDict]
) -> nn.ModuleList | None:
    """The encoders of the columns after the first (the model's own is the first's): ``None``
    for one molecule a row or a shared encoder, else ``molecules - 1`` new ones."""
    if molecules < 1:
        raise ValueError(f"molecules must be >= 1, got {molecules}")
    if molecules == 1 or shared:
        return None
    return nn.ModuleList(make() for _ in range(molecules - 1))
