"""``foldexp data stats|import KIND key=value …`` for files of one's own.

``KIND`` is a dataset config (``molecules_csv``, ``trees_ptb``, ``text_csv``, or a preset such
as ``esol``); the ``key=value`` pairs are its keys (``path=tox.csv targets=[NR-AR]``). The files
are read by the same builder as ``foldexp train`` reads them, so every row is checked exactly as
training would check it, and split exactly as training would split it.

``stats`` prints one table row per split (examples, sizes, labels or targets) and saves
histograms. ``import`` checks the files that way and copies them into the data folder
(``<data_dir>/<kind>/``), printing the overrides that train on the copy.
"""

from __future__ import annotations

import filecmp
import shlex
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from foldexp.experiments.build import build_dataset

__all__ = ["KINDS", "dataset_stats", "import_files", "stats_rows"]

KINDS = ("molecules_csv", "trees_ptb", "text_csv")


def _example_sizes(example: Any) -> dict[str, float]:
    if hasattr(example, "n_atoms"):
        return {"atoms": example.n_atoms}
    if hasattr(example, "leaves"):
        return {"leaves": len(example.leaves()), "depth": example.depth()}
    tokens = example[0] if isinstance(example, tuple) else example
    return {"tokens": len(tokens)}


def _labels(example: Any, names: list[str]) -> list[tuple[str, float]]:
    """(name, value) of each labelled target or class of an example."""
    if hasattr(example, "target_mask"):
        return [
            (names[i] if i < len(names) else str(i), float(v))
            for i, (v, m) in enumerate(zip(example.targets, example.target_mask))
            if m
        ]
    label = example.label if hasattr(example, "label") else example[1]
    return [("label", float(label))] if label is not None and label >= 0 else []


def stats_rows(bundle: Any) -> tuple[pd.DataFrame, dict[str, dict[str, np.ndarray]]]:
    """One row per split: examples, mean and max of each size, label or target summaries."""
    rows, samples = {}, {}
    for split in ("train", "dev", "test"):
        examples = list(getattr(bundle, split))
        sizes = pd.DataFrame([_example_sizes(e) for e in examples])
        row: dict[str, Any] = {"examples": len(examples)}
        for column in sizes:
            row[f"mean {column}"] = float(sizes[column].mean())
            row[f"max {column}"] = int(sizes[column].max())
        names = list(bundle.info.get("target_names") or [])
        labels = pd.DataFrame(
            [lv for e in examples for lv in _labels(e, names)], columns=["k", "v"]
        )
        for key, values in labels.groupby("k")["v"]:
            row[f"{key} labelled"] = int(values.size)
            row[f"{key} mean"] = float(values.mean())
        rows[split] = row
        if examples:  # an empty split has nothing to draw
            samples[split] = {c: sizes[c].to_numpy() for c in sizes}
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index.name = "split"
    return table, samples


def dataset_stats(kind: str, cfg: Any, out_dir: str | Path) -> int:
    """Prints the split statistics of a dataset of one's own (``cfg``: its composed dataset
    config, ``foldexp.train.app.compose_dataset_config``) and saves ``OUT/KIND.png``."""
    from foldexp.data.commands import markdown_table, save_histograms

    table, samples = stats_rows(build_dataset(cfg))
    print(markdown_table(table))
    if samples:
        png = Path(out_dir) / f"{kind}.png"
        save_histograms(samples, f"{kind} ({cfg.get('path', '')})", png)
        print(f"\nhistograms: {png}")
    return 0


def import_files(kind: str, cfg: Any, overrides: Sequence[str], data_dir: str | Path) -> int:
    """Checks a dataset of one's own as training would (``cfg``: its composed dataset config),
    then copies its file(s) into ``data_dir/kind/`` and prints the overrides that train on the
    copy (``overrides``: the ``key=value`` pairs ``cfg`` was composed from)."""
    bundle = build_dataset(cfg)
    source = Path(str(cfg.path))
    target = Path(data_dir) / kind / source.name
    if _differs(source, target):
        raise FileExistsError(
            f"{target} exists and holds another {'folder' if source.is_dir() else 'file'}: "
            f"remove it, or rename {source} before importing it"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    if source.is_dir():
        shutil.copytree(source, target, dirs_exist_ok=True)
    else:
        shutil.copy2(source, target)
    print(f"checked {source}: {bundle.sizes()}")
    print(f"installed {target}; train on it with:")
    keys = [f"dataset.{o.removeprefix('dataset.')}" for o in overrides]
    rest = [k for k in keys if not k.startswith("dataset.path=")]
    words = [f"experiment={kind}", f"dataset.path={target}", *rest]
    print("  foldexp train " + " ".join(_shell_word(w) for w in words))
    return 0


def _shell_word(word: str) -> str:
    """``word`` as a shell reads it back: bare when it can be, else in double quotes (Hydra's
    own ``"dataset.targets=['a b']"`` style) when nothing in it is special there."""
    if shlex.quote(word) == word:
        return word
    if not any(c in word for c in '"$`\\!'):
        return f'"{word}"'
    return shlex.quote(word)


def _differs(source: Path, target: Path) -> bool:
    """Copying ``source`` (a file or a folder) to ``target`` would replace a file that holds
    something else."""
    if not target.exists():
        return False
    if source.is_dir():
        return not target.is_dir() or any(
            _differs(f, target / f.relative_to(source)) for f in source.rglob("*") if f.is_file()
        )
    return not target.is_file() or not filecmp.cmp(source, target, shallow=False)
