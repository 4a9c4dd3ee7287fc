"""Run-directory files: atomic writes, ``metrics.csv``, learning-curve plots, ``results.json``.

Every file is written to a temporary name in the same folder and renamed into place, so a run
killed at any moment leaves either the old file or the new one, never half of one.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

__all__ = ["atomic_write", "write_text", "write_json", "write_metrics_csv", "plot_curves"]


def atomic_write(path: str | os.PathLike[str], write: Callable[[str], None]) -> Path:
    """Calls ``write(tmp_path)`` then renames the temporary file onto ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def write_text(path: str | os.PathLike[str], text: str) -> Path:
    return atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def write_json(path: str | os.PathLike[str], data: Any) -> Path:
    return write_text(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def write_metrics_csv(path: str | os.PathLike[str], rows: list[dict[str, Any]]) -> Path:
    """One row per epoch, columns in first-seen order."""
    return atomic_write(path, lambda tmp: pd.DataFrame(rows).to_csv(tmp, index=False))


def plot_curves(csv_path: str | os.PathLike[str], out_dir: str | os.PathLike[str]) -> list[Path]:
    """Draws ``loss.png`` and ``<metric>.png`` from a ``metrics.csv`` (redrawable any time)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    df = pd.read_csv(csv_path)
    out_dir = Path(out_dir)
    written = []
    metrics = sorted(
        {c.split("_", 1)[1] for c in df.columns if c.startswith(("train_", "dev_")) and "_" in c}
    )
    for metric in metrics:
        cols = [c for c in (f"train_{metric}", f"dev_{metric}") if c in df.columns]
        if not cols or df[cols].isna().all().all():
            continue
        fig, ax = plt.subplots(figsize=(5, 3.5))
        for c in cols:
            ax.plot(df["epoch"], df[c], marker="o", label=c.split("_", 1)[0])
        ax.set_xlabel("epoch")
        ax.set_ylabel(metric)
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        path = out_dir / f"{metric}.png"
        atomic_write(path, lambda tmp, fig=fig: fig.savefig(tmp, format="png", dpi=100))
        plt.close(fig)
        written.append(path)
    return written
