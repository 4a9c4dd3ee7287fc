"""``foldexp ensemble DIR`` over a sweep of molecule runs (weave, D-MPNN): the members'
predictions of a split combined with their spread (``foldexp.analysis.spread.combine``: the
mean, and ``<target>_std``, the members' population std or, for ``mve``/``evidential``
members, ``sqrt(mean σ² + var of the means)``).

It writes ``ensemble.json`` and ``ensemble.md`` (each member's metrics, their mean and the
ensemble's, scored by the members' own ``summarize``: RMSE and MAE, or ROC-AUC and PRC-AUC),
and ``ensemble_predictions.csv``: each molecule of the split (its SMILES), the combined
``<target>`` and ``<target>_std`` (or ``<task>_probability`` and its ``_std``), and its label.
For regression the ensemble's spread is also scored as the run's own uncertainty is
(``coverage90`` and ``miscalibration_area`` of ``foldexp.models.uncertainty``; not calibrated
on dev: the members' spread as it is).
"""

from __future__ import annotations

import csv
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from foldexp.analysis.spread import combine, spread_columns
from foldexp.data.cells import markdown_cell, spreadsheet_row
from foldexp.models.uncertainty import uncertainty_metrics
from foldexp.models.weave import MoleculeTaskModel
from foldexp.train.artifacts import atomic_write, write_json, write_text
from foldexp.train.runs import load_run_model

__all__ = ["is_molecule_model", "molecule_ensemble"]


def is_molecule_model(model: Any) -> bool:
    """A weave or D-MPNN model (``MoleculeTaskModel``): ensembled by this module."""
    return isinstance(model, MoleculeTaskModel)


def _member(model: Any, examples: list[Any], batch_size: int) -> tuple[torch.Tensor, ...]:
    """The model's ``(N, C)`` predictions over ``examples``, the ``(N, T)`` targets and mask."""
    preds, targets, masks = [], [], []
    with torch.no_grad():
        for start in range(0, len(examples), batch_size):
            batch = model.collate(examples[start : start + batch_size])
            preds.append(model.predict(batch).detach().cpu().double())
            targets.append(batch.targets.double())
            masks.append(batch.mask.bool())
    return torch.cat(preds), torch.cat(targets), torch.cat(masks)


def _score(model: Any, values: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> dict:
    """``values`` (``(N, T)``: targets or probabilities) scored by ``model.summarize``."""
    if model.task == "classification":
        sums: dict[str, Any] = {"probability": values, "label": targets, "labelled": mask}
        return {k: v for k, v in model.summarize(sums).items() if not k.startswith("ece")}
    err = torch.where(mask, values - targets, torch.zeros_like(values))
    sums = {"sq_error": float((err**2).sum()), "abs_error": float(err.abs().sum()),
            "count": float(mask.sum())}  # fmt: skip
    for k in range(targets.shape[1]):
        sums[f"sq_error_{k}"] = float((err[:, k] ** 2).sum())
        sums[f"abs_error_{k}"] = float(err[:, k].abs().sum())
        sums[f"count_{k}"] = float(mask[:, k].sum())
    return model.summarize(sums)


def molecule_ensemble(
    runs: Sequence[tuple[Path, dict[str, Any]]],
    bundles: dict[str, Any],
    examples: list[Any],
    split: str,
    batch_size: int,
    out: Path,
) -> dict[str, Any]:
    """Combines the members' predictions of ``split``; writes the three files into ``out``."""
    from foldexp.train.runs import dataset_key

    members, passes, model, columns = [], [], None, None
    for run, config in runs:
        model = load_run_model(run, config, bundles[dataset_key(config)])
        preds, targets, mask = _member(model, examples, batch_size)
        own = list(model.prediction_columns())
        if columns is not None and own != columns:
            raise ValueError(
                f"foldexp ensemble: {run} predicts {own}, {runs[0][0]} {columns}; the members "
                "of an ensemble must predict the same columns"
            )
        columns = own
        values = preds[:, [k for k, c in enumerate(own) if not c.endswith("_std")]]
        members.append({"run": str(run), "seed": config.get("seed"),
                        **_score(model, values, targets, mask)})  # fmt: skip
        passes.append(preds)
    assert model is not None and columns is not None
    combined = combine(columns, torch.stack(passes)).double()  # (N, 2T): value, std
    value, std = combined[:, 0::2], combined[:, 1::2]
    ensemble = _score(model, value, targets, mask)
    if model.task == "regression":
        names = model._suffixes
        spread = uncertainty_metrics(value - targets, std, mask, [1.0] * len(names), names)
        ensemble.update({k: v for k, v in spread.items() if "uncalibrated" not in k})
    metrics = [m for m in members[0] if m not in ("run", "seed")]
    result = {
        "split": split,
        "members": members,
        "mean_member": {m: statistics.fmean(x[m] for x in members) for m in metrics},
        "ensemble": ensemble,
    }
    write_json(out / "ensemble.json", result)
    write_text(out / "ensemble.md", _markdown(result, metrics))
    header = ["smiles", *spread_columns(columns), *(f"label_{t}" for t in model.target_names)]

    def rows(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8", newline="") as f:
            writer = csv.writer(f, lineterminator="\n")
            writer.writerow(spreadsheet_row(header))
            for k, example in enumerate(examples):
                labels = [f"{y:g}" if m else "" for y, m in zip(targets[k].tolist(), mask[k])]
                row = [example.smiles, *combined[k].tolist(), *labels]
                writer.writerow(spreadsheet_row(row))

    atomic_write(out / "ensemble_predictions.csv", rows)
    print(_markdown(result, metrics))
    return result


def _markdown(result: dict[str, Any], metrics: list[str]) -> str:
    split = result["split"]
    extra = [m for m in result["ensemble"] if m not in metrics]
    head = "| | " + " | ".join(f"{split}_{m}" for m in [*metrics, *extra]) + " |"

    def row(name: str, values: dict[str, float]) -> str:
        cells = " | ".join(f"{values[m]:.4f}" if m in values else "" for m in [*metrics, *extra])
        return f"| {markdown_cell(name)} | {cells} |"

    lines = [f"# Ensemble of {len(result['members'])} molecule runs ({split})", "", head]
    lines += ["|---|" + "---|" * (len(metrics) + len(extra))]
    lines += [row(f"seed {m['seed']} ({m['run']})", m) for m in result["members"]]
    lines += [row("mean of the members", result["mean_member"])]
    lines += [row(f"**ensemble of {len(result['members'])}**", result["ensemble"]), ""]
    lines += [f"Predictions and their spread: ensemble_predictions.csv ({split})."]
    return "\n".join(lines) + "\n"
