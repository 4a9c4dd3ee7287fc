"""``foldexp ensemble DIR``: the runs of a sweep as one model, by averaging their predictions.

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
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from foldexp.train.artifacts import read_verified_json, write_json, write_text
from foldexp.train.build import build_dataset, build_model
from foldexp.train.checkpoint import load_checkpoint
from foldexp.validate import ConfigError, check_registered

__all__ = ["dataset_key", "find_runs", "load_run_model", "run_bundles", "run_ensemble"]

SPLITS = ("train", "dev", "test")


def find_runs(
    dirs: Sequence[str | Path], allow_targets: Sequence[str] = ()
) -> list[tuple[Path, dict[str, Any]]]:
    """Each run folder under ``dirs`` (one holding ``results.json`` and ``checkpoints/best.pt``)
    with the resolved config its ``results.json`` records, sorted by seed, then path.

    The folders are untrusted: a config naming a ``_target_`` outside foldexp's registry (and
    ``allow_targets``) is refused before anything is built from it."""
    paths: set[Path] = set()
    for d in map(Path, dirs):
        if not d.exists():
            raise FileNotFoundError(f"foldexp ensemble: {d} does not exist")
        paths.update(p.parent for p in d.rglob("results.json"))
    if not paths:
        raise FileNotFoundError(
            f"foldexp ensemble: no results.json under {', '.join(map(str, dirs))}"
        )
    runs = []
    for run in paths:
        if not (run / "checkpoints" / "best.pt").exists():
            raise FileNotFoundError(
                f"foldexp ensemble: {run} has results.json but no checkpoints/best.pt"
            )
        results = read_verified_json(run / "results.json")
        config = results.get("config") if isinstance(results, dict) else None
        if not isinstance(config, dict) or "dataset" not in config or "model" not in config:
            raise ConfigError(f"foldexp ensemble: {run / 'results.json'} has no resolved config")
        check_registered(config, str(run / "results.json"), allowed=set(allow_targets))
        runs.append((run, config))
    return sorted(runs, key=lambda rc: (rc[1].get("seed", 0), str(rc[0])))


def dataset_key(config: dict[str, Any]) -> str:
    """The key of a run's dataset config in ``run_bundles``' mapping."""
    return json.dumps(config["dataset"], sort_keys=True)


def run_bundles(
    runs: list[tuple[Path, dict[str, Any]]],
    split: str,
    mismatch: Callable[[Path, str], str],
    expected: list[Any] | None = None,
) -> tuple[dict[str, Any], list[Any]]:
    """One dataset bundle per distinct dataset config of ``runs`` (by ``dataset_key``), and the
    split's examples, which every bundle must give alike (and equal to ``expected`` if given).

    A bundle that differs raises ``ValueError(mismatch(run, keys))``, ``keys`` naming the
    ``dataset.*`` keys where its run's config differs from the first run's.
    """
    bundles: dict[str, Any] = {}
    examples = expected
    first = runs[0][1]
    for run, config in runs:
        if dataset_key(config) in bundles:
            continue
        bundle = bundles[dataset_key(config)] = build_dataset(config["dataset"])
        if examples is None:
            examples = list(getattr(bundle, split))
        elif list(getattr(bundle, split)) != list(examples):
            keys = ", ".join(
                f"dataset.{k}" for k in _differences(config["dataset"], first["dataset"])
            )
            raise ValueError(mismatch(run, keys))
    return bundles, list(examples or [])


def _differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


def load_run_model(run: Path, config: dict[str, Any], bundle: Any) -> Any:
    """The run's model, rebuilt from its resolved ``config`` over ``bundle`` (its dataset), with
    the weights of ``checkpoints/best.pt``, in evaluation mode."""
    model = build_model(config["model"], bundle.info)
    load_checkpoint(run / "checkpoints" / "best.pt", model, restore_rng=False)
    return model.eval()


def _member_probabilities(
    run: Path, config: dict[str, Any], bundle: Any, examples: list[Any], batch_size: int
) -> tuple[Any, torch.Tensor, torch.Tensor]:
    """The run's model with its best weights, its root probabilities and the root labels."""
    model = load_run_model(run, config, bundle)
    if not (hasattr(model, "root_probabilities") and hasattr(model, "score_roots")):
        raise TypeError(
            f"foldexp ensemble: {run}: {type(model).__name__} has no root_probabilities(batch) "
            "and score_roots(probs, labels); only classifiers that give class probabilities "
            "can be ensembled"
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
    runs = find_runs(dirs, allow_targets)

    def mismatch(run: Path, keys: str) -> str:
        return (
            f"foldexp ensemble: the {split} examples of {run} differ from those of "
            f"{runs[0][0]} (their configs differ in {keys}); the members of an ensemble must "
            "score the same examples"
        )

    bundles, examples = run_bundles(runs, split, mismatch)
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
    out = Path(out_dir) if out_dir is not None else Path(dirs[0])
    write_json(out / "ensemble.json", result)
    write_text(out / "ensemble.md", _markdown(result, metrics))
    print(_markdown(result, metrics))
    return result


def _markdown(result: dict[str, Any], metrics: list[str]) -> str:
    split = result["split"]
    head = "| | " + " | ".join(f"{split}_{m}" for m in metrics) + " |"
    rule = "|---|" + "---|" * len(metrics)

    def row(name: str, values: dict[str, float]) -> str:
        return f"| {name} | " + " | ".join(f"{100 * values[m]:.2f}" for m in metrics) + " |"

    lines = [f"# Ensemble of {len(result['members'])} runs ({split}, %)", "", head, rule]
    lines += [row(f"seed {m['seed']} ({m['run']})", m) for m in result["members"]]
    lines += [row("mean of the members", result["mean_member"])]
    lines += [row(f"**ensemble of {len(result['members'])}**", result["ensemble"]), ""]
    lines += ["Ensemble of the first k members:", "", "| k | " + head[4:], rule]
    lines += [row(str(s["members"]), s) for s in result["by_size"]]
    return "\n".join(lines) + "\n"
