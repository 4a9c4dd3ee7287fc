"""The ``molecules_csv`` dataset builder: any CSV of SMILES and targets, by config alone.

``foldexp train experiment=molecules_csv dataset.path=FILE dataset.smiles_column=COL
dataset.targets=[T1,T2] [dataset.task=auto|regression|classification]`` featurises every SMILES
(RDKit, cached under ``dataset.cache_dir``), splits the molecules (``random`` with
``dataset.seed``, Bemis-Murcko ``scaffold``, or ``column``: a column of the file says train,
valid/dev or test per row; ``task=auto``, the default, takes targets holding only 0, 1 and blanks
for classification and says so) and reports what the weave model is built from in ``bundle.info``:
feature sizes, the task, the target names, target statistics (regression) and positive-class
weights (classification with ``dataset.balance=true``). ESOL and FreeSolv are presets of it
(``conf/dataset/esol.yaml``, ``freesolv.yaml``).

What would make a run meaningless is refused here, before the model is built: classification
labels other than 0/1 (naming the row and column), a split without a single labelled target,
and for classification a dev or test split in which no task has both classes (its ROC AUC would
not exist; ``foldexp eval``, which scores a trained run on a file, reports such an AUC as not
defined instead). The file itself is checked as it is read (``foldexp.data.molecules``); a
column it lacks is told with the key that names it (``dataset.targets=[COL]``).

``molecule_inputs`` turns SMILES into model inputs for ``foldexp predict``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from foldexp.config import enum_value
from foldexp.config.errors import ConfigError
from foldexp.config.molecule_columns import smiles_columns
from foldexp.data.errors import FormatError, MoleculeError
from foldexp.data.molecule_csv import (
    MAX_ATOMS,
    MAX_SMILES_CHARS,
    record_lines,
)
from foldexp.data.molecule_graphs import MoleculeDataset, MoleculeGraph
from foldexp.data.molecule_sets import load_molecule_sets
from foldexp.data.molecules import FETCHABLE, load_molecule_csv, not_found
from foldexp.data.splits import take
from foldexp.experiments.csv_columns import missing_columns
from foldexp.experiments.datasets import DataBundle
from foldexp.experiments.molecule_features import check_features, features_info, molecule_inputs
from foldexp.experiments.molecule_parts import MOLECULE_SPLITS, split_parts
from foldexp.experiments.molecule_targets import default_targets

__all__ = ["molecules_csv", "molecule_inputs"]

log = logging.getLogger(__name__)

_SPLITS = ("train", "dev", "test")
_SHOW_BAD_LABELS = 3  # rows named when classification labels are not 0/1


def _unset(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value.strip() in ("", "???"))


def _check_keys(
    path: Any,
    targets: Any,
    task: str,
    on_invalid: str,
    split: str,
    split_column: Any,
    fractions: Sequence[float],
) -> None:
    """The key combinations a schema cannot express, refused before the file is read."""
    usage = (
        "foldexp train experiment=molecules_csv dataset.path=FILE dataset.smiles_column=COL "
        "dataset.targets=[T1,T2]"
    )
    if _unset(path):
        raise ConfigError(f"dataset.path is not set: name the molecule CSV, e.g. {usage}")
    if _unset(targets) or isinstance(targets, str) or not len(targets):
        raise ConfigError(f"dataset.targets names no column: give a list, e.g. {usage}")
    names = [str(t) for t in targets]
    twice = sorted({t for t in names if names.count(t) > 1})
    if twice:  # a target's metrics are named after it: two of one name would share them
        raise ConfigError(f"dataset.targets names {', '.join(twice)} twice; give each column once")
    checks = {
        "task": (task, ("auto", "regression", "classification")),
        "on_invalid": (on_invalid, ("error", "skip")),
        "split": (split, MOLECULE_SPLITS),
    }
    for key, (value, allowed) in checks.items():
        if value not in allowed:
            raise ConfigError(f"dataset.{key}={value}; expected one of {', '.join(allowed)}")
    if split == "column" and _unset(split_column):
        raise ConfigError(
            "dataset.split=column needs dataset.split_column: the column saying train, valid "
            "(or dev) or test on each row"
        )
    if split != "column" and not _unset(split_column):
        raise ConfigError(
            f"dataset.split_column={split_column} is only read with dataset.split=column "
            f"(dataset.split={split})"
        )
    if len(fractions) != 3 or not np.isclose(sum(fractions), 1.0):
        raise ConfigError(
            f"dataset.fractions={list(fractions)}; expected three shares (train, dev, test) "
            "summing to 1"
        )


def _load(
    path: Path,
    smiles_column: str | list[str],
    targets: list[str],
    on_invalid: str,
    cache_dir: str | None,
    limits: tuple[int, int],
    extra: Mapping[str, list[str]],
) -> MoleculeDataset:
    if not path.is_file():
        if path.name in FETCHABLE:
            raise not_found(FETCHABLE[path.name], path)
        raise FileNotFoundError(f"dataset.path={path}: no such file")
    if cache_dir is not None:  # a folder of the user's is written: say which
        log.info("featurised molecules are cached in %s (paths.cache_dir)", cache_dir)
    smiles_column = smiles_columns(smiles_column)  # a list: several molecules a row
    load = load_molecule_csv if isinstance(smiles_column, str) else load_molecule_sets
    return load(
        path,
        smiles_column=smiles_column,  # type: ignore[arg-type]
        target_columns=targets,
        on_invalid="raise" if on_invalid == "error" else "skip",
        cache_dir=cache_dir,
        progress=False,
        max_atoms=limits[0],
        max_smiles_chars=limits[1],
        **extra,
    )


def _choose_task(dataset: MoleculeDataset, n: int, trained: Mapping[str, Any] | None) -> str:
    """``dataset.task=auto``: a trained run's task (``foldexp eval``), else classification when
    every label of the first ``n`` molecules is 0 or 1 (empty = missing) and both occur,
    regression otherwise (a column of 1.0 alone is a constant, not a class); the choice and how
    to override it are logged, so that a toxicity file of 0/1 columns never trains as
    regression without a word."""
    if trained is not None and trained.get("task") in ("regression", "classification"):
        return str(trained["task"])
    targets, mask = dataset.targets[:n], dataset.target_mask[:n]
    other = np.argwhere(mask & (targets != 0) & (targets != 1))
    both = bool((mask & (targets == 0)).any() and (mask & (targets == 1)).any())
    if len(other) or not both:
        why = "the labels are all 0 or all 1" if mask.any() else "no label at all"
        if len(other):
            i, k = other[0]
            why = f"column {dataset.target_names[k]!r} holds {targets[i, k]:g}, not only 0 and 1"
        log.info(
            "dataset.task=auto: training regression (%s); dataset.task=classification for 0/1 "
            "labels", why,
        )  # fmt: skip
        return "regression"
    log.info(
        "dataset.task=auto: training classification (ROC AUC, PRC AUC): every label of %s is "
        "0, 1 or empty; dataset.task=regression to fit them as numbers",
        ", ".join(dataset.target_names),
    )
    return "classification"


def _check_binary(dataset: MoleculeDataset, n: int) -> None:
    """Classification labels must be 0 or 1; the first offenders are named by row and column."""
    targets, mask = dataset.targets[:n], dataset.target_mask[:n]
    bad = np.argwhere(mask & (targets != 0) & (targets != 1))
    if not len(bad):
        return
    named = bad[:_SHOW_BAD_LABELS]
    lines = record_lines(dataset.source, (dataset.rows[i] for i, _ in named))
    shown = "; ".join(
        f"row {dataset.rows[i]} (line {lines[int(dataset.rows[i])]}), column "
        f"{dataset.target_names[k]!r}: {targets[i, k]:g}"
        for i, k in named
    )
    more = f"; and {len(bad) - _SHOW_BAD_LABELS} more" if len(bad) > _SHOW_BAD_LABELS else ""
    raise MoleculeError(
        f"{dataset.source}: dataset.task=classification needs labels 0 or 1 (empty = missing), "
        f"but {len(bad)} are not: {shown}{more}. A measured quantity is a regression target "
        "(dataset.task=regression), or threshold it into a 0/1 column"
    )


def _check_labelled(
    dataset: MoleculeDataset,
    parts: tuple[np.ndarray, ...],
    task: str,
    split: str,
    both_classes: bool = True,
) -> None:
    """Every non-empty split must hold a labelled target; for classification (``both_classes``:
    to train), dev and test need a task with both classes (ROC AUC selects the epoch and is the
    test score)."""
    mask, targets = dataset.target_mask, dataset.targets
    for name, idx in zip(_SPLITS, parts, strict=True):
        if not len(idx):
            continue  # an empty split is reported by the trainer's own check
        if not mask[idx].any():
            raise MoleculeError(
                f"{dataset.source}: the {name} split ({len(idx)} molecules, dataset.split="
                f"{split}) has no labelled target at all; every target of its molecules is "
                "missing. Use another split or seed, or fill in the labels"
            )
        if both_classes and task == "classification" and name != "train":
            both = [
                k
                for k in range(mask.shape[1])
                if {0.0, 1.0} <= set(targets[idx][mask[idx][:, k], k].tolist())
            ]
            if not both:
                raise MoleculeError(
                    f"{dataset.source}: in the {name} split ({len(idx)} molecules, "
                    f"dataset.split={split}) no task has both a 0 and a 1 label, so ROC AUC "
                    "does not exist there; use more molecules, other fractions, another seed "
                    "or another split"
                )


def _statistics(train: list[MoleculeGraph]) -> tuple[list[float], list[float]]:
    """Each target's mean and standard deviation over the labelled training entries."""
    targets = np.stack([g.targets for g in train]).astype(np.float64)
    mask = np.stack([g.target_mask for g in train])
    count = np.maximum(mask.sum(0), 1)
    mean = (targets * mask).sum(0) / count
    std = np.sqrt((((targets - mean) * mask) ** 2).sum(0) / count)
    std = np.where(std > 0, std, 1.0)  # a constant target: nothing to scale
    return [float(m) for m in mean], [float(s) for s in std]


def _pos_weight(train: list[MoleculeGraph]) -> list[float]:
    """Each task's negatives / positives among the labelled training entries (1 where a task
    lacks one class: nothing to balance)."""
    targets = np.stack([g.targets for g in train])
    mask = np.stack([g.target_mask for g in train])
    pos = ((targets == 1) & mask).sum(0)
    neg = ((targets == 0) & mask).sum(0)
    return [float(n / p) if p and n else 1.0 for p, n in zip(pos, neg, strict=True)]


def molecules_csv(
    path: str,
    targets: Sequence[str],
    smiles_column: str | Sequence[str] = "smiles",
    task: str = "auto",
    on_invalid: str = "error",
    split: str = "random",
    split_column: str | None = None,
    fractions: Sequence[float] = (0.8, 0.1, 0.1),
    seed: int = 0,
    limit: int = 0,
    cache_dir: str | None = None,
    balance: bool = False,
    units: Sequence[str] | None = None,
    name: str = "molecules_csv",
    trained: Mapping[str, Any] | None = None,
    max_atoms: int = MAX_ATOMS,
    max_smiles_chars: int = MAX_SMILES_CHARS,
    folds: int = 5,
    fold: int = 0,
    features: Sequence[str] = (),  # features, feature_*: experiments/molecule_features.py
    feature_columns: Sequence[str] = (),
    feature_clip: float | None = 10.0,
    clusters: int = 0,
) -> DataBundle:
    """A molecule CSV featurised into graphs and split (the ``dataset.*`` keys, see the module
    docstring and ``foldexp.config.MoleculeDataConfig``).

    ``limit`` keeps the first N valid molecules (0: all). ``bundle.info`` is plain JSON:
    ``atom_features``, ``pair_features``, ``num_targets``, ``task``, ``target_names``,
    ``target_mean`` / ``target_std`` (regression: over the labelled training entries; 0 / 1 for
    classification), ``pos_weight`` (classification with ``balance``, else ``None``) and
    ``target_units`` (``units``: one per target, or ``None``).
    ``folds``, ``fold``, ``clusters``: ``split=kfold|scaffold_kfold|kmeans`` (``molecule_parts``).
    ``trained``: a trained run's ``info`` (``foldexp eval``): a split of one class is scored
    (its AUCs are not defined), not refused, and the training split may be empty.
    """
    task, on_invalid, split = enum_value(task), enum_value(on_invalid), enum_value(split)
    fractions = tuple(float(f) for f in fractions)
    targets = default_targets(path, targets, smiles_column, split_column, trained)  # if unset
    _check_keys(path, targets, task, on_invalid, split, split_column, fractions)
    targets = [str(t) for t in targets]
    _check_units_and_balance(targets, task, units, balance)
    extra = check_features(features, feature_columns, trained)
    columns = {"dataset.smiles_column": smiles_column, "dataset.targets": targets}
    if split == "column":
        columns["dataset.split_column"] = str(split_column)
    try:
        limits = (int(max_atoms), int(max_smiles_chars))
        dataset = _load(Path(path), smiles_column, targets, on_invalid, cache_dir, limits, extra)
        graphs = list(dataset)[:limit] if limit else list(dataset)
        if task == "auto":
            task = _choose_task(dataset, len(graphs), trained)
            if balance and task != "classification":
                raise ConfigError(
                    "dataset.balance=true weights positive labels, but dataset.task=auto chose "
                    "regression (the labels are not all 0 or 1)"
                )
        if task == "classification":
            _check_binary(dataset, len(graphs))
        parts = split_parts(
            dataset, graphs, split, split_column, fractions, seed, (folds, fold), clusters
        )
    except FormatError:
        random = "or cut the file at random: dataset.split=random dataset.split_column=null"
        named = missing_columns(Path(path), columns, {"dataset.split_column": random})
        if named is not None:
            raise named from None
        raise
    _check_labelled(dataset, parts, task, split, both_classes=trained is None)
    train, dev, test = (take(graphs, p) for p in parts)
    if not train and trained is None:
        raise ConfigError(
            f"dataset {name}: the train split is empty (train 0, dev {len(dev)}, test "
            f"{len(test)}); check dataset.limit, the split fractions or the files"
        )
    info = _info(graphs[0], train, targets, task, units, balance)
    info.update(features_info(extra, graphs, train, dataset.rows, feature_clip))
    return DataBundle(train, dev, test, info)


def _check_units_and_balance(
    targets: list[str], task: str, units: Sequence[str] | None, balance: bool
) -> None:
    """``dataset.units`` gives one unit per target; ``dataset.balance`` needs classification."""
    if units is not None and len(units) != len(targets):
        raise ConfigError(
            f"dataset.units names {len(units)} units for {len(targets)} targets "
            f"(dataset.targets={targets}); give one per target, in the same order"
        )
    if balance and task == "regression":
        raise ConfigError(
            "dataset.balance=true weights positive labels: it needs task=classification"
        )


def _info(
    first: MoleculeGraph,
    train: list[MoleculeGraph],
    targets: list[str],
    task: str,
    units: Sequence[str] | None,
    balance: bool,
) -> dict[str, Any]:
    """``bundle.info`` (see ``molecules_csv``): feature sizes from ``first``, the targets'
    statistics over ``train`` (regression) and the positives' weight (``balance``); with
    several molecules a row (``MoleculeSet``), ``molecules``: how many."""
    molecules = getattr(first, "molecules", (first,))
    first = molecules[0]
    if task == "regression" and train:
        mean, std = _statistics(train)
    else:
        mean, std = [0.0] * len(targets), [1.0] * len(targets)
    return {
        "atom_features": int(first.atom_features.shape[1]),
        "pair_features": int(first.pair_features.shape[2]),
        "num_targets": len(targets),
        "target_mean": mean,
        "target_std": std,
        "task": task,
        "target_names": targets,
        "pos_weight": _pos_weight(train) if balance and train else None,
        "target_units": [str(u) for u in units] if units is not None else None,
        **({"molecules": len(molecules)} if len(molecules) > 1 else {}),
    }
