"""The ``dataset.features`` and ``dataset.feature_columns`` keys of ``molecules_csv``, and the
same features for ``foldexp predict``'s molecules (``foldexp.data.mol_features`` computes
them; ``foldexp.models.extra_features`` standardises and joins them to the readout).

``check_features`` reads the keys (each name once; for ``foldexp eval`` the trained run's
features, name for name); ``features_info`` gives ``info``'s ``feature_names``,
``feature_mean`` and ``feature_std`` over the training split only, and ``feature_clip``;
``with_features`` gives predict's molecules their features, a user's columns read from the
input's other cells.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from foldexp.config import enum_value
from foldexp.config.errors import ConfigError
from foldexp.data.errors import MoleculeError
from foldexp.data.mol_features import feature_info, feature_names, molecule_features, number_cell
from foldexp.data.molecule_csv import MAX_ATOMS, MAX_SMILES_CHARS
from foldexp.data.molecule_graphs import MoleculeGraph

__all__ = ["check_features", "features_info", "molecule_inputs", "run_features", "with_features"]


def check_features(
    features: Sequence[Any], columns: Sequence[Any], trained: Mapping[str, Any] | None
) -> dict[str, list[str]]:
    """``{"features": [...], "feature_columns": [...]}``, each name once (``load_molecule_csv``'s
    keywords); for ``foldexp eval`` (``trained``: the run's ``info``), the run's own features."""
    names = {
        "features": [str(enum_value(f)) for f in features],
        "feature_columns": [str(c) for c in columns],
    }
    for key, values in names.items():
        twice = sorted({v for v in values if values.count(v) > 1})
        if twice:
            raise ConfigError(f"dataset.{key} names {', '.join(twice)} twice; give each once")
    wanted = feature_names(*names.values())
    if trained is not None and list(trained.get("feature_names", [])) != wanted:
        raise ConfigError(
            f"dataset.features={names['features']}, dataset.feature_columns="
            f"{names['feature_columns']} give {len(wanted)} features, but the run was trained on "
            f"{len(trained.get('feature_names', []))} others (another RDKit version, or other keys)"
        )
    return names


def features_info(
    extra: Mapping[str, list[str]],
    graphs: Sequence[MoleculeGraph],
    train: Sequence[MoleculeGraph],
    rows: Sequence[int],
    clip: float | None = None,
) -> dict[str, Any]:
    """``info``'s feature entries (none without features): names, each feature's mean and std
    over ``train`` alone, and ``feature_clip`` (``clip``: the standardised values' bound); a
    feature not finite for some of ``graphs`` is warned about."""
    if not any(extra.values()):
        return {}
    values = np.stack([g.features for g in graphs])
    train_values = np.stack([g.features for g in train]) if train else values[:0]
    info = feature_info(feature_names(*extra.values()), values, train_values, rows)
    return {**info, "feature_clip": None if clip is None else float(clip)}


def run_features(dataset: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """A trained run's ``(features, feature_columns)`` from its ``dataset`` config."""
    return (
        [str(enum_value(f)) for f in dataset.get("features") or ()],
        [str(c) for c in dataset.get("feature_columns") or ()],
    )


def with_features(
    graph: MoleculeGraph,
    mol: Any,
    extra: tuple[list[str], list[str]],
    cells: Mapping[str, str],
    where: str,
) -> MoleculeGraph:
    """``graph`` with the run's features (``extra``): the sets' of ``mol`` (RDKit), then the
    user's columns from ``cells`` (the input's other cells by column), a cell that is not a
    finite number a ``MoleculeError`` naming ``where`` (the file and line) and the column."""
    sets, columns = extra
    own = []
    for column in columns:
        if column not in cells:
            raise MoleculeError(f"{where}: no column {column!r} (dataset.feature_columns)")
        own.append(number_cell(cells[column].strip(), f"{where}, column {column!r}"))
    values = np.concatenate([molecule_features(mol, sets), np.array(own, dtype=np.float32)])
    return dataclasses.replace(graph, features=values.astype(np.float32))


def molecule_inputs(
    values: list[str],
    max_atoms: int = MAX_ATOMS,
    max_smiles_chars: int = MAX_SMILES_CHARS,
    extra: tuple[list[str], list[str]] = ([], []),
    cells: Sequence[Mapping[str, str]] | None = None,
    where: Sequence[str] | None = None,
) -> list[tuple[MoleculeGraph | None, str | None]]:
    """SMILES → ``(graph, None)`` with every target missing, or ``(None, why)`` for a SMILES
    RDKit cannot read, an empty one, or one past the run's size limits (``dataset.max_atoms``,
    ``dataset.max_smiles_chars``): one bad input never fails the others. ``extra``: the run's
    features (``run_features``), a user's columns read from ``cells`` (each input's other
    cells by column; ``where``: its file and line, for a cell that is not a number)."""
    from foldexp.data import featurize  # lazy: RDKit

    out: list[tuple[MoleculeGraph | None, str | None]] = []
    for k, value in enumerate(values):
        smiles = value.strip()
        mol, why = featurize.read_smiles(smiles, max_atoms, max_smiles_chars)
        if mol is None:
            out.append((None, why))
            continue
        atoms, pairs = featurize.featurize_mol(mol)
        none = np.zeros(0, dtype=np.float32)
        graph = MoleculeGraph(smiles, atoms, pairs, none, none.astype(bool))
        if any(extra):
            try:
                own = cells[k] if cells is not None else {}
                graph = with_features(graph, mol, extra, own, where[k] if where else "input")
            except MoleculeError as exc:
                out.append((None, str(exc)))
                continue
        out.append((graph, None))
    return out
