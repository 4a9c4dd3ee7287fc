"""``foldexp ensemble DIR``: the runs of a sweep as one model, by averaging their predictions
(a sweep of molecule runs: their predictions with their spread, ``ensemble_molecules.py``).

The Fold paper reports its SST Tree-LSTM both as a single model (mean and std over 30 runs) and
as the ensemble of those 30 runs (Looks et al. 2017, Table 2: 52.3 → 53.6 fine-grained). This
module does the second: it finds every run under the given folders (``results.json`` beside
``checkpoints/best.pt``), rebuilds each run's model from the resolved config in its
``results.json``, loads its best weights, and averages the class probabilities at every root
of a split. The ensemble is scored by the models' own rules (``score_roots``: the argmax over
the predicted classes, binary accuracy by summed polarity), and so is each member, so the table
puts the members, their mean and the ensemble side by side, with the ensemble of the first
``k`` members for every ``k``.

Every member is rebuilt with its own dataset config (vocabulary, vectors), and all of them must
give the same examples of the split, in the same order: an ensemble of runs scored on different
splits (a molecule split follows the run's seed) would mean nothing, and is refused.

Run folders are untrusted: each run's config is checked exactly as ``foldexp predict`` and
``eval`` check theirs (``foldexp.train.runs.read_run_config``, then the model's shapes against
its checkpoint in ``build_fitting_model``) before any dataset or model is built from it.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from foldexp.analysis.ensemble_molecules import is_molecule_model, molecule_ensemble
from foldexp.data.cells import markdown_cell
from foldexp.train.artifacts import write_json, write_text
from foldexp.train.runs import dataset_key, find_runs, load_run_model, run_bundles

__all__ = ["run_ensemble"]

SPLITS = ("train", "dev", "test")


def _member_probabilities(
    run: Path, config: dict[str, Any], bundle: Any, examples: list[Any], batch_size: int
) -> tuple[Any, torch.Tensor, torch.Tensor]:
    """The run's model with its best weights, its root probabilities and the root labels."""
    model = load_run_model(run, config, bundle)
    if not (hasattr(model, "root_probabilities") and hasattr(model, "score_roots")):
        raise ValueError(  # a user's choice of folders: one line, status 2
            f"{run}: {type(model).__name__} has no root_probabilities(batch) and "
            "score_roots(probs, labels); only classifiers of trees and sentences that give class "
            "probabilities can be ensembled (foldexp report DIR tables a molecule sweep)"
        )
    probs, labels = [], []
    with torch.no_grad():
        for start in range(0, len(examples), batch_size):
            batch = model.collate(examples[start : start + batch_size])
            probs.append(model.root_probabilities(batch).float())
            labels.append(batch.root_labels)
    return model, torch.cat(probs), torch.cat(labels)


def _score(model: Any, probs: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    sums = {k: float(v) for k, v in model.score_roots(probs, labels).items()}
    return model.summarize(sums)


def run_ensemble(
    dirs: Sequence[str | Path],
    split: str = "test",
    out_dir: str | Path | None = None,
    batch_size: int = 256,
    allow_targets: Sequence[str] = (),
) -> dict[str, Any]:
    """Scores the average of the runs' root probabilities on ``split``; writes
    ``ensemble.json`` and ``ensemble.md`` into ``out_dir`` (default: the first folder)."""
    if split not in SPLITS:
        raise ValueError(
            f"foldexp ensemble: --split {split!r}; expected one of {', '.join(SPLITS)}"
        )
    if batch_size < 1:
        raise ValueError(f"--batch-size={batch_size}; expected a value >= 1")
    runs = find_runs(dirs, allow_targets)

    def mismatch(run: Path, keys: str) -> str:
        return (
            f"foldexp ensemble: the {split} examples of {run} differ from those of "
            f"{runs[0][0]} (their configs differ in {keys}); the members of an ensemble must "
            "score the same examples"
        )

    bundles, examples = run_bundles(runs, split, mismatch)
    out = Path(out_dir) if out_dir is not None else Path(dirs[0])
    first = load_run_model(runs[0][0], runs[0][1], bundles[dataset_key(runs[0][1])])
    if is_molecule_model(first):  # predictions and their spread (ensemble_molecules.py)
        return molecule_ensemble(runs, bundles, examples, split, batch_size, out)
    members, by_size, total = [], [], None
    for k, (run, config) in enumerate(runs, start=1):
        bundle = bundles[dataset_key(config)]
        model, probs, labels = _member_probabilities(run, config, bundle, examples, batch_size)
        total = probs if total is None else total + probs
        members.append(
            {"run": str(run), "seed": config.get("seed"), **_score(model, probs, labels)}
        )
        by_size.append({"members": k, **_score(model, total / k, labels)})
    metrics = [m for m in by_size[-1] if m != "members"]
    mean = {m: statistics.fmean(member[m] for member in members) for m in metrics}
    result = {
        "split": split,
        "members": members,
        "mean_member": mean,
        "ensemble": {m: by_size[-1][m] for m in metrics},
        "by_size": by_size,
    }
    write_json(out / "ensemble.json", result)
    write_text(out / "ensemble.md", _markdown(result, metrics))
    print(_markdown(result, metrics))
    return result


def _markdown(result: dict[str, Any], metrics: list[str]) -> str:
    split = result["split"]
    head = "| | " + " | ".join(f"{split}_{m}" for m in metrics) + " |"
    rule = "|---|" + "---|" * len(metrics)

    def row(name: str, values: dict[str, float]) -> str:
        cells = " | ".join(f"{100 * values[m]:.2f}" for m in metrics)
        return f"| {markdown_cell(name)} | {cells} |"

    lines = [f"# Ensemble of {len(result['members'])} runs ({split}, %)", "", head, rule]
    lines += [row(f"seed {m['seed']} ({m['run']})", m) for m in result["members"]]
    lines += [row("mean of the members", result["mean_member"])]
    lines += [row(f"**ensemble of {len(result['members'])}**", result["ensemble"]), ""]
    lines += ["Ensemble of the first k members:", "", "| k | " + head[4:], rule]
    lines += [row(str(s["members"]), s) for s in result["by_size"]]
    return "\n".join(lines) + "\n"
