"""The functions behind ``foldexp data fetch|import|stats``.

Each ``*_command`` prints what it did for a person reading a terminal and returns an exit code;
the statistics themselves come from :func:`sst_stats` and :func:`molecule_stats` as pandas
tables, so notebooks and tests can use them without parsing text.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from foldexp.data.cells import markdown_cell
from foldexp.data.fetch import DATASETS, fetch, import_dataset
from foldexp.data.paths import resolve_data_dir
from foldexp.data.sst import SST_SPLITS, load_sst

__all__ = [
    "STATS_DATASETS",
    "fetch_command",
    "import_command",
    "markdown_table",
    "molecule_stats",
    "sst_stats",
    "stats_command",
]

STATS_DATASETS = ("sst", "esol", "freesolv")

PathLike = str | os.PathLike[str]


def fetch_command(name: str, data_dir: PathLike | None = None, *, force: bool = False) -> int:
    """Download a dataset (``foldexp data fetch NAME``); see :func:`~foldexp.data.fetch.fetch`."""
    root = fetch(name, data_dir, force=force)
    print(f"{name}: ready under {root}")
    return 0


def import_command(name: str, path: PathLike, data_dir: PathLike | None = None) -> int:
    """Install a local copy (``foldexp data import NAME PATH``); see ``import_dataset``."""
    root = import_dataset(name, path, data_dir)
    files = ", ".join(str(root / rel) for rel in DATASETS[name].installed)
    print(f"{name}: imported from {path}; checked and installed as {files}")
    return 0


def markdown_table(frame: pd.DataFrame, float_format: str = "{:.3g}") -> str:
    """Render a DataFrame as a Markdown pipe table (no extra dependency needed)."""

    def cell(value: object) -> str:
        if isinstance(value, float | np.floating):
            return float_format.format(value)
        return markdown_cell(str(value))

    header = [markdown_cell(str(c)) for c in [frame.index.name or "", *frame.columns]]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for index, *values in frame.itertuples(index=True, name=None):  # keeps per-column dtypes
        lines.append("| " + " | ".join([str(index), *(cell(v) for v in values)]) + " |")
    return "\n".join(lines)


def sst_stats(data_dir: PathLike | None = None) -> tuple[pd.DataFrame, dict[str, dict]]:
    """Per-split SST statistics.

    Returns:
        ``(table, samples)``: one table row per split (trees, nodes, leaves, sentence length and
        depth, root label counts) and per split the raw ``lengths`` and ``depths`` arrays.
    """
    rows, samples = {}, {}
    for split in SST_SPLITS:
        trees = load_sst(split, data_dir)
        lengths = np.array([len(t.leaves()) for t in trees])
        depths = np.array([t.depth() for t in trees])
        roots = np.bincount([t.label for t in trees], minlength=5)
        rows[split] = {
            "trees": len(trees),
            "nodes": sum(t.size() for t in trees),
            "leaves": int(lengths.sum()),
            "mean length": float(lengths.mean()),
            "max length": int(lengths.max()),
            "mean depth": float(depths.mean()),
            "max depth": int(depths.max()),
            **{f"root={k}": int(roots[k]) for k in range(5)},
        }
        samples[split] = {"length (leaves)": lengths, "depth": depths}
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index.name = "split"
    return table, samples


def molecule_stats(name: str, data_dir: PathLike | None = None) -> tuple[pd.DataFrame, dict]:
    """Statistics of ``esol`` or ``freesolv``: molecules, atoms and the target.

    Returns:
        ``(table, samples)`` with one table row and the raw ``atoms`` and target arrays.
    """
    from foldexp.data import molecules  # lazy: RDKit

    loader = {"esol": molecules.load_esol, "freesolv": molecules.load_freesolv}[name]
    dataset = loader(data_dir)
    atoms = np.array([g.n_atoms for g in dataset])
    target = dataset.targets[:, 0][dataset.target_mask[:, 0]]
    row = {
        "molecules": len(dataset),
        "mean atoms": float(atoms.mean()),
        "max atoms": int(atoms.max()),
        "target": dataset.target_names[0],
        "target mean": float(target.mean()),
        "target std": float(target.std()),
        "target min": float(target.min()),
        "target max": float(target.max()),
    }
    table = pd.DataFrame([row], index=pd.Index([name], name="dataset"))
    return table, {"all": {"atoms": atoms, dataset.target_names[0]: target}}


def save_histograms(samples: dict[str, dict[str, np.ndarray]], title: str, path: Path) -> None:
    """One histogram per quantity, one colour per group; written with the Agg canvas."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    quantities = list(next(iter(samples.values())))
    fig = Figure(figsize=(5 * len(quantities), 3.6), layout="constrained")
    FigureCanvasAgg(fig)  # explicit Agg canvas: no pyplot, no global backend switch
    axes = fig.subplots(1, len(quantities), squeeze=False)[0]
    for ax, quantity in zip(axes, quantities, strict=True):
        pooled = np.concatenate([values[quantity] for values in samples.values()])
        if np.issubdtype(pooled.dtype, np.integer):
            bins = np.arange(pooled.min(), pooled.max() + 2) - 0.5  # one bin per integer
        else:
            bins = np.histogram_bin_edges(pooled, bins=30)
        for group, values in samples.items():
            # Densities, so splits of very different sizes can be compared by shape.
            ax.hist(values[quantity], bins=bins, density=True, histtype="step", label=group)
        ax.set_xlabel(quantity)
        ax.set_ylabel("fraction")
        if len(samples) > 1:
            ax.legend()
    fig.suptitle(title)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)


def stats_command(
    name: str, data_dir: PathLike | None = None, out_dir: PathLike = "outputs/data-stats"
) -> int:
    """Print a statistics table for a dataset and save histograms as ``OUT_DIR/NAME.png``."""
    collectors: dict[str, Callable[[], tuple[pd.DataFrame, dict]]] = {
        "sst": lambda: sst_stats(data_dir),
        "esol": lambda: molecule_stats("esol", data_dir),
        "freesolv": lambda: molecule_stats("freesolv", data_dir),
    }
    if name not in collectors:
        raise ValueError(f"no statistics for {name!r}; expected one of {', '.join(collectors)}")
    table, samples = collectors[name]()
    png = Path(out_dir) / f"{name}.png"
    save_histograms(samples, f"{name} ({resolve_data_dir(data_dir)})", png)
    print(markdown_table(table))
    print(f"\nhistograms: {png}")
    return 0
