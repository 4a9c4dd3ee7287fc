"""``dataset.smiles_column``: one SMILES column, or a list of them (several molecules a row).

A list names 1 to ``MAX_MOLECULES`` distinct columns; with two or more, each row's molecules
are encoded one a column and their readouts joined before the head, which the D-MPNN does
(``model.shared_encoder``); the weave model reads one molecule a row, and molecule-level
features (``dataset.features``, ``dataset.feature_columns``) are read for one molecule a row
only: both are refused at compose time, in one line naming the keys.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from foldexp.config.errors import ConfigError

__all__ = ["MAX_MOLECULES", "SET_MODELS", "check_smiles_columns", "smiles_columns"]

#: The most SMILES columns a row: each is an encoder's input.
MAX_MOLECULES = 4
#: The models that read several molecules a row.
SET_MODELS = ("foldexp.models.dmpnn.DMPNNModel",)


def smiles_columns(value: Any) -> str | list[str]:
    """``dataset.smiles_column`` as a column name, or a list of two or more distinct names (a
    list of one is that name).

    Raises:
        ConfigError: not a name or a list of 1..``MAX_MOLECULES`` distinct names.
    """
    if isinstance(value, str):
        return value
    names = list(value) if isinstance(value, Sequence) else None
    if (
        names is None
        or not 1 <= len(names) <= MAX_MOLECULES
        or not all(isinstance(c, str) and c.strip() for c in names)
    ):
        raise ConfigError(
            f"dataset.smiles_column={value!r:.80}; expected a column name or a list of 1 to "
            f"{MAX_MOLECULES} column names (several molecules a row)"
        )
    twice = sorted({c for c in names if names.count(c) > 1})
    if twice:
        raise ConfigError(f"dataset.smiles_column names {', '.join(twice)} twice; give each once")
    return names[0] if len(names) == 1 else [str(c) for c in names]


def check_smiles_columns(dataset: Any, model: Mapping[str, Any] | None) -> None:
    """Refuses a bad ``dataset.smiles_column``, and several columns with a model or features
    that read one molecule a row (see the module docstring)."""
    if not isinstance(dataset, Mapping) or "smiles_column" not in dataset:
        return
    columns = smiles_columns(dataset["smiles_column"])
    _check_feature_columns(dataset, [columns] if isinstance(columns, str) else list(columns))
    if isinstance(columns, str):
        return
    target = str((model or {}).get("_target_", ""))
    if target.startswith("foldexp.") and target not in SET_MODELS:
        raise ConfigError(
            f"dataset.smiles_column={columns} (several molecules a row) needs model=dmpnn; "
            f"model={(model or {}).get('name')} reads one molecule a row"
        )
    for key in ("features", "feature_columns"):
        if dataset.get(key):
            raise ConfigError(
                f"dataset.{key}={list(dataset[key])} is read for one molecule a row, not with "
                f"dataset.smiles_column={columns}"
            )


def _check_feature_columns(dataset: Mapping[str, Any], smiles: list[str]) -> None:
    """Refuses a feature column that is a target (its label would be an input) or a SMILES
    column."""
    targets = dataset.get("targets")
    targets = (
        [str(t) for t in targets]
        if isinstance(targets, Sequence) and not isinstance(targets, str)
        else []
    )
    for column in dataset.get("feature_columns") or ():
        role = (
            "a target (dataset.targets)"
            if str(column) in targets
            else ("a SMILES column (dataset.smiles_column)" if str(column) in smiles else None)
        )
        if role is not None:
            raise ConfigError(
                f"dataset.feature_columns names {column!r}, which is {role}: a feature column "
                "must be another column of the file"
            )
