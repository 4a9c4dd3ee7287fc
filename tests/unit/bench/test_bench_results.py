"""Ratios and summaries come from the right columns: frames built by hand, no timing at all."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from foldexp.bench.results import (
    table1_ratios,
    table1_summary,
    throughput_summary,
    to_frame,
)


def test_table1_ratios_use_the_papers_definitions() -> None:
    per_batch = pd.DataFrame(
        {
            "manual": [8.0, 0.5],
            "dynamic": [10.0, 0.25],
            "full_dynamic": [12.0, 0.3],
            "schedule_full_dynamic": [4.0, 0.1],
            "manual_node": [float("nan"), 2.0],
        },
        index=[16, 1],
    )
    t = table1_ratios(per_batch)
    assert t.loc[16, "manual_tree"] == pytest.approx(0.5)
    assert t.loc[16, "cost_ratio"] == pytest.approx(10.0 / 8.0)  # dynamic / manual
    assert t.loc[16, "full_ratio"] == pytest.approx(12.0 / 8.0)
    # manual per-tree time at batch 1 / full-dynamic per-tree time at batch b
    assert t.loc[16, "speedup_ratio"] == pytest.approx(0.5 / (12.0 / 16))
    assert t.loc[1, "speedup_ratio"] == pytest.approx(0.5 / 0.3)
    assert t.loc[16, "speedup_node"] == pytest.approx(2.0 / (12.0 / 16))  # per-node manual @ 1
    assert t.loc[16, "schedule_share"] == pytest.approx(4.0 / 16.0)
    assert list(t.index) == [16, 1]


def test_speedup_is_missing_without_batch_one() -> None:
    t = table1_ratios(pd.DataFrame({"manual": [2.0], "dynamic": [3.0], "full_dynamic": [4.0]},
                                   index=[8]))  # fmt: skip
    assert math.isnan(t.loc[8, "speedup_ratio"]) and t.loc[8, "cost_ratio"] == 1.5


def _rows(column: str, batch: int, seconds: list[float], **kw: object) -> list[dict]:
    return [
        {"experiment": "table1", "mode": "inference", "column": column, "batch_size": batch,
         "repeat": r, "seconds": s, **kw}
        for r, s in enumerate(seconds)
    ]  # fmt: skip


def test_table1_summary_takes_medians_of_the_tidy_rows() -> None:
    rec = (
        _rows("manual", 4, [1.0, 9.0, 2.0])  # median 2
        + _rows("dynamic", 4, [3.0, 3.0, 100.0])  # median 3
        + _rows("full_dynamic", 4, [4.0, 5.0, 6.0])
        + _rows("schedule_full_dynamic", 4, [1.0, 1.0, 1.0])
        + _rows("manual", 1, [0.8])
        + _rows("dynamic", 1, [0.4])
        + _rows("full_dynamic", 1, [0.5])
    )
    df = to_frame(rec, {"device": "cpu"})
    t = table1_summary(df, "inference")
    assert t.loc[4, "cost_ratio"] == pytest.approx(1.5)
    assert t.loc[4, "speedup_ratio"] == pytest.approx(0.8 / (5.0 / 4))
    assert t.loc[4, "schedule_share"] == pytest.approx(1 / 6)
    assert set(df["device"]) == {"cpu"}


def test_throughput_counts_items_per_median_second_and_keeps_skip_notes() -> None:
    rec = [
        {"experiment": "peers", "column": "engine", "repeat": r, "seconds": s, "items": 100,
         "batch_size": 100, "unit": "trees", "note": "v"}
        for r, s in enumerate([1.0, 2.0, 4.0])
    ] + [{"experiment": "peers", "column": "dgl", "repeat": -1, "seconds": float("nan"),
          "note": "skipped: not installed"}]  # fmt: skip
    t = throughput_summary(to_frame(rec, {}), "peers").set_index("column")
    assert t.loc["engine", "per_s"] == pytest.approx(50.0)
    assert (t.loc["engine", "per_s_min"], t.loc["engine", "per_s_max"]) == (25.0, 100.0)
    assert math.isnan(t.loc["dgl", "per_s"]) and "skipped" in t.loc["dgl", "note"]


def test_paired_ratios_take_each_repeats_own_ratio() -> None:
    rec = (
        _rows("manual", 8, [1.0, 1.0, 3.0, 3.0, 1.0])
        # repeat 1 ran under load: the ratio of medians (2.5 / 1.0) sees it, the paired does not
        + _rows("dynamic", 8, [1.1, 2.5, 3.3, 3.3, 2.6])
        + _rows("full_dynamic", 8, [1.2, 1.2, 3.6, 3.6, float("nan")])
    )
    t = table1_summary(to_frame(rec, {}), "inference")
    assert t.loc[8, "cost_ratio"] == pytest.approx(2.6 / 1.0)
    assert t.loc[8, "cost_ratio_paired"] == pytest.approx(1.1)  # ratios 1.1 2.5 1.1 1.1 2.6
    assert t.loc[8, "full_ratio_paired"] == pytest.approx(1.2)  # the missing repeat is left out


def test_paired_ratios_are_missing_without_a_manual_case() -> None:
    rec = _rows("dynamic", 4, [1.0, 2.0]) + _rows("full_dynamic", 4, [1.0, 2.0])
    t = table1_summary(to_frame(rec, {}), "inference")
    assert math.isnan(t.loc[4, "cost_ratio_paired"])


@pytest.mark.parametrize("mode", ["inference", "training"])
def test_the_ratio_figure_compares_with_the_papers_figures_of_its_own_mode(
    mode: str, monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    """The training figure drew the paper's inference columns as if they were training's."""
    from foldexp.bench import plots

    summary = pd.DataFrame(
        {"manual_tree": [0.5, 0.1], "dynamic_tree": [0.4, 0.1], "full_tree": [0.4, 0.1],
         "cost_ratio": [1.2, 1.5], "speedup_ratio": [1.2, 5.0],
         "speedup_node": [float("nan")] * 2},
        index=[1, 16],
    )  # fmt: skip
    monkeypatch.setattr(plots, "table1_summary", lambda df, m: summary)
    figures = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: figures.append(fig) or path)
    plots.plot_table1(pd.DataFrame(), mode, tmp_path)
    cost, speedup = figures[1].axes
    labels = {ln.get_label() for ax in (cost, speedup) for ln in ax.get_lines()}
    if mode == "inference":
        assert {"paper CPU", "paper GPU"} <= labels
    else:
        assert not {"paper CPU", "paper GPU"} & labels
        paper = [ln for ln in cost.get_lines() if ln.get_label().startswith("paper, training")]
        assert len(paper) == 1 and set(paper[0].get_ydata()) == {1.6}
        assert "the paper gives none for training" in speedup.get_title().replace("\n", " ")
    figure = figures[1]
    figure.canvas.draw()  # each title inside the figure (the training one ran past its edge)
    for ax in (cost, speedup):
        box = ax.title.get_window_extent(figure.canvas.get_renderer())
        assert 0 <= box.x0 and box.x1 <= figure.bbox.x1
    import matplotlib.pyplot as plt

    plt.close("all")
