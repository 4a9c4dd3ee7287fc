"""A run over many targets, and a report over many runs, draw a bounded figure (issue 52, row 2).

Before: ``per_task.png`` drew one panel per target, every epoch (1,000 targets: over 9.5 minutes
an epoch), and ``foldexp report`` one bar per row of the summary (10,000 runs: a 1031 x 423,675
px image). Now the small multiples show at most ``MAX_PANELS`` targets, saying how many were left
out, and are redrawn after epochs 1, 2, 4, 8, … and the last only; the report draws at most
``MAX_BARS`` bars. The bounds are asserted by counting panels and bars, not by timing.
"""

from __future__ import annotations

import math
import struct
from pathlib import Path

import pandas as pd
import pytest

from foldexp.analysis.report import MAX_BARS, run_report
from foldexp.train import curves
from foldexp.train.artifacts import write_json
from foldexp.train.curves import MAX_PANELS, per_task_due, plot_curves
from foldexp.train.task_table import compact_metrics, per_task_keys

TARGETS = [f"t_{i}" for i in range(1000)]  # names with an underscore, as real ones have


def _png_size(path: Path) -> tuple[int, int]:
    width, height = struct.unpack(">II", path.read_bytes()[16:24])
    return width, height


def _metrics(tmp_path: Path, epochs: int = 3) -> Path:
    rows = []
    for epoch in range(epochs):
        row = {"epoch": epoch, "train_loss": 1.0 / (epoch + 1), "dev_loss": 1.1 / (epoch + 1)}
        row.update({"train_rmse": 0.5, "dev_rmse": 0.6})
        for k, t in enumerate(TARGETS):
            row[f"train_rmse_{t}"] = 0.5 + k * 1e-4
            row[f"dev_rmse_{t}"] = 0.6 + k * 1e-4
        rows.append(row)
    path = tmp_path / "metrics.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_small_multiples_of_1000_targets_draw_a_bounded_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    drawn, titles = [], []
    curves_of, save = curves._curves, curves._save_figure

    def counting(ax, df, cols, *args):  # type: ignore[no-untyped-def]
        drawn.append(cols)
        assert len(drawn) <= MAX_PANELS + 2, "a panel per target"  # stop early, not in minutes
        return curves_of(ax, df, cols, *args)

    def saving(plt, fig, path):  # type: ignore[no-untyped-def]
        titles.append(fig._suptitle.get_text() if fig._suptitle else "")
        return save(plt, fig, path)

    monkeypatch.setattr(curves, "_curves", counting)
    monkeypatch.setattr(curves, "_save_figure", saving)
    written = plot_curves(_metrics(tmp_path), tmp_path, "run", 1, TARGETS)
    assert tmp_path / "per_task.png" in written
    assert len(drawn) == MAX_PANELS + 2  # loss.png, rmse.png, and the page of targets
    assert "the first 24; 976 more in metrics.csv" in titles[-1]
    width, height = _png_size(tmp_path / "per_task.png")
    assert width <= 1300 and height <= 1500, (width, height)

    drawn.clear()
    plot_curves(tmp_path / "metrics.csv", tmp_path, "run", 1, TARGETS, per_task=False)
    assert len(drawn) == 2  # an epoch that is not due draws no per-target page


def test_per_task_page_is_redrawn_log_many_times() -> None:
    for epochs in (1, 3, 80, 1000):
        due = [e for e in range(epochs) if per_task_due(e, epochs)]
        assert due[-1] == epochs - 1  # the last epoch's page is always there
        assert len(due) <= math.log2(epochs) + 2, (epochs, due)
    assert per_task_due(4, 80, last=True)  # early stopping: the page of the last epoch


def test_per_task_keys_are_found_by_split_not_by_suffix() -> None:
    row = {"dev_rmse": 0.5, **{f"dev_rmse_{t}": 0.5 for t in TARGETS}, "dev_loss": 1.0}
    keys = per_task_keys(list(row), TARGETS)
    assert keys == {f"dev_rmse_{t}" for t in TARGETS}
    assert "dev_rmse_t_3" not in compact_metrics(row, TARGETS)


def test_report_over_many_runs_draws_a_bounded_figure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for k in range(3 * MAX_BARS):
        run = tmp_path / "sweep" / str(k)
        (run / ".hydra").mkdir(parents=True)
        (run / ".hydra" / "overrides.yaml").write_text(
            f"- optimizer.lr={k}\n- model.x={'y' * 300}\n"
        )
        write_json(run / "results.json", {"test_accuracy": k / 1000, "seed": 0})
    bars = []
    import matplotlib.axes

    real = matplotlib.axes.Axes.barh

    def counting(self, y, width, *args, **kwargs):  # type: ignore[no-untyped-def]
        bars.append(len(width))
        return real(self, y, width, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "barh", counting)
    run_report([tmp_path / "sweep"], "test_accuracy", tmp_path / "out")
    assert bars == [MAX_BARS]
    width, height = _png_size(tmp_path / "out" / "report.png")
    assert height <= 100 * (0.25 * 3 * MAX_BARS + 0.3 * MAX_BARS + 3), (width, height)
    out = capsys.readouterr().out
    assert f"the first {MAX_BARS} of {3 * MAX_BARS} rows" in out
    assert len(pd.read_csv(tmp_path / "out" / "summary.csv")) == 3 * MAX_BARS  # all kept
