"""``foldexp report DIR``: one table (and plot) from many runs.

Finds every ``results.json`` under the given folders (a sweep's ``multirun`` folder, or several
single runs), flattens each into one row — the run's overrides, its seed, its metrics — and writes
``report.csv``, ``report.md`` (sorted by the chosen metric) and ``report.png``. Runs that differ
only by seed or by cross-validation fold (``dataset.fold``) are also summarised as mean ± std in
``summary.csv`` / ``summary.md``. Each ``results.json`` must match its ``.sha256`` sidecar
(``--trust-unverified`` to accept one that has none, or that was edited).
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from foldexp.data.cells import markdown_frame, spreadsheet_frame
from foldexp.data.errors import FormatError
from foldexp.train.artifacts import atomic_write, read_verified_json, write_text

__all__ = ["MAX_BARS", "choose_metric", "collect_results", "run_report"]

#: Bars of ``report.png`` (and rows of the printed summary) at most.
MAX_BARS = 40


_AVERAGED = ("seed=", "dataset.fold=")  # overrides left out of a summary's groups


def _overrides(run_dir: Path) -> str:
    path = run_dir / ".hydra" / "overrides.yaml"
    if not path.exists():
        return ""
    items = [
        ln[2:].strip()
        for ln in path.read_text(encoding="utf-8", errors="replace").splitlines()
        if ln.startswith("- ")
    ]
    # seeds and cross-validation folds are what a summary averages over, not a setting
    return " ".join(i for i in items if not i.startswith(_AVERAGED))


def collect_results(dirs: Sequence[str | Path]) -> pd.DataFrame:
    """One row per ``results.json`` found under ``dirs``."""
    rows: list[dict[str, Any]] = []
    for d in dirs:
        d = Path(d)
        if not d.exists():
            raise FileNotFoundError(f"foldexp report: {d} does not exist")
        for path in sorted(d.rglob("results.json")):
            # checked against its sidecar (an edited figure is refused), then parsed: a broken
            # file fails naming itself, line and column
            data = read_verified_json(path)
            if not isinstance(data, dict):
                raise FormatError(
                    f"{path}: expected a JSON object of a run's results, found "
                    f"{type(data).__name__} {str(data)[:40]}"
                )
            row = {"run": str(path.parent), "overrides": _overrides(path.parent)}
            row.update({k: v for k, v in data.items() if not isinstance(v, (dict, list))})
            rows.append(row)
    if not rows:
        raise FileNotFoundError(
            f"foldexp report: no results.json under {', '.join(map(str, dirs))}"
        )
    return pd.DataFrame(rows)


def _check_metric(df: pd.DataFrame, metric: str) -> None:
    """Refuses a metric no run has, or a run whose value of it is not a number (a hand-edited
    ``results.json``), naming the file: the table sorts and averages it."""
    if metric not in df.columns:
        numeric = [c for c in df.columns if pd.api.types.is_numeric_dtype(df[c])]
        raise ValueError(f"metric {metric!r} is in no results.json; numeric columns: {numeric}")
    for run, value in zip(df["run"], df[metric]):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            if value is None or (isinstance(value, float) and value != value):
                continue  # a run without the metric: left out of the means
            raise FormatError(f"{Path(run) / 'results.json'}: {metric}={value!r} is not a number")


def _markdown(frame: pd.DataFrame) -> str:
    """``frame`` as a markdown table whose cells cannot break it (``|`` escaped)."""
    return markdown_frame(frame).to_markdown(index=False, floatfmt=".4f")


def _title(df: pd.DataFrame, metric: str, dirs: Sequence[str | Path]) -> str:
    """What the plot compares: the folders, the experiments, the metric and the runs' count."""
    folders = ", ".join(Path(d).resolve().name for d in dirs)
    if "experiment" in df.columns:
        folders += " · " + ", ".join(sorted({str(e) for e in df["experiment"].dropna()}))
    plotted = int(df[metric].notna().sum())  # a run without the metric is in no bar
    runs = f"{plotted} runs" + (f" of {len(df)}" if plotted < len(df) else "")
    return textwrap.shorten(f"{folders}: {metric}, {runs}", 110, placeholder=" …")


#: metric names (a part of them, between underscores) for which smaller is better
SMALLER_IS_BETTER = ("rmse", "mae", "mse", "loss", "nll", "error", "miscalibration")


def _base(metric: str) -> str:
    """``test_rmse`` → ``rmse``: the metric without ``best_`` and its split."""
    name = metric.removeprefix("best_")
    for split in ("train_", "dev_", "test_"):
        name = name.removeprefix(split)
    return name


def _one(df: pd.DataFrame, column: str) -> str | None:
    """The one value of ``column`` across the runs, ``None`` if none has it; several refused."""
    if column not in df.columns:
        return None
    values = sorted({str(v) for v in df[column].dropna()})
    if len(values) > 1:
        raise ValueError(
            f"the runs differ in {column} ({', '.join(values)}): choose the metric to compare "
            "with --metric (and --ascending or --descending)"
        )
    return values[0] if values else None


def choose_metric(
    df: pd.DataFrame, metric: str | None = None, ascending: bool | None = None
) -> tuple[str, bool]:
    """``(metric, ascending)`` of a report: by default the test score of the runs' own
    ``select_metric`` (``dev_roc_auc`` → ``test_roc_auc``; ``test_accuracy`` for runs that do
    not say), in the runs' ``select_mode`` for it; else smaller is better for errors and losses
    (``SMALLER_IS_BETTER``), larger for the rest. ``ascending`` given: as given."""
    select = _one(df, "select_metric")
    if metric is None:
        metric = "test_accuracy"
        if select is not None:
            found = [m for m in (f"test_{_base(select)}", f"best_{select}") if m in df.columns]
            metric = found[0] if found else select
    if ascending is None:
        mode = _one(df, "select_mode")
        if select is not None and mode is not None and _base(metric) == _base(select):
            ascending = mode == "min"
        else:
            ascending = any(p in SMALLER_IS_BETTER for p in _base(metric).split("_"))
    return metric, ascending


def run_report(
    dirs: Sequence[str | Path],
    metric: str | None = None,
    out_dir: str | Path | None = None,
    ascending: bool | None = None,
) -> pd.DataFrame:
    """Writes report.csv/.md/.png (and summary.csv/.md) into ``out_dir`` (default: first dir).
    ``metric`` and ``ascending``: ``choose_metric``'s defaults, the runs' own selection."""
    df = collect_results(dirs)
    metric, ascending = choose_metric(df, metric, ascending)
    print(f"{metric}: {'smaller' if ascending else 'larger'} is better, best first")
    _check_metric(df, metric)
    df = df.sort_values(metric, ascending=ascending).reset_index(drop=True)
    out = Path(out_dir or dirs[0])
    cols = [
        c
        for c in [
            "overrides",
            "experiment",
            "seed",
            metric,
            "best_epoch",
            "steps",
            "train_seconds",
            "run",
        ]
        if c in df.columns
    ]
    atomic_write(out / "report.csv", lambda tmp: spreadsheet_frame(df).to_csv(tmp, index=False))
    write_text(out / "report.md", _markdown(df[cols]) + "\n")

    group = ["experiment", "overrides"] if "experiment" in df.columns else ["overrides"]
    summary = (
        df.groupby(group, dropna=False)[metric]
        .agg(["mean", "std", "min", "max", "count"])
        .reset_index()
        .sort_values("mean", ascending=ascending)
    )
    safe = spreadsheet_frame(summary)
    atomic_write(out / "summary.csv", lambda tmp: safe.to_csv(tmp, index=False))
    write_text(out / "summary.md", _markdown(summary) + "\n")

    _plot(summary, group, metric, _title(df, metric, dirs), out / "report.png")
    shown = summary.head(MAX_BARS)
    print(_markdown(shown))
    if len(summary) > len(shown):
        print(f"(the first {len(shown)} of {len(summary)} rows; all in {out / 'summary.md'})")
    return df


def _plot(summary: pd.DataFrame, group: list[str], metric: str, title: str, path: Path) -> None:
    """``report.png``: a bar per summary row, the first ``MAX_BARS`` in the summary's order (the
    best first), each label at most three lines; the title says how many were left out. Its
    size is bounded whatever the number of runs (10,000 had made a 1031 x 423,675 px image)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = summary.head(MAX_BARS)
    # Override strings can be long (paths): wrap them so the bars keep their room.
    labels = [
        textwrap.fill(
            textwrap.shorten(
                " ".join(str(v) for v in r if str(v)) or "(defaults)", 140, placeholder=" …"
            ),
            48,
        )
        for r in shown[group].itertuples(index=False)
    ]
    lines = sum(label.count("\n") + 1 for label in labels)
    fig, ax = plt.subplots(figsize=(10, 0.25 * lines + 0.3 * len(labels) + 1.2))
    rows = range(len(labels))  # positions, so that two alike labels keep a bar each
    ax.barh(rows, shown["mean"], xerr=shown["std"].fillna(0), color="tab:blue", alpha=0.8)
    ax.set_yticks(rows, labels)
    ax.invert_yaxis()
    ax.set_xlabel(f"{metric} (mean ± std over seeds and folds)")
    if len(summary) > len(shown):
        title += f" (the first {len(shown)} of {len(summary)}; all in summary.csv)"
    ax.set_title(title, fontsize=10)
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=100, bbox_inches="tight"))
    plt.close(fig)
