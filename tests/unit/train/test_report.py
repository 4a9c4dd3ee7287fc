"""``foldexp report`` on hand-made run folders: sorting, seed summaries, long override labels."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from foldexp.analysis.report import run_report
from foldexp.cli import main
from foldexp.train.artifacts import write_text


def _run(root: Path, name: str, seed: int, acc: float, overrides: list[str]) -> None:
    d = root / name
    (d / ".hydra").mkdir(parents=True)
    (d / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    results = {"experiment": "sst_treelstm", "seed": seed, "test_accuracy": acc, "config": {}}
    write_text(d / "results.json", json.dumps(results), checksum=True)  # as a run writes it


def test_report_sorts_summarises_and_draws_long_labels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    long = "dataset.word_vectors=/a/very/long/path/to/some/glove/vectors/glove.6B.50d.txt.gz"
    _run(tmp_path, "0", 1, 0.48, [long, "seed=1"])
    _run(tmp_path, "1", 2, 0.50, [long, "seed=2"])
    _run(tmp_path, "2", 1, 0.40, ["model.hidden_size=8", "seed=1"])
    import matplotlib.figure

    titles: list[str] = []
    savefig = matplotlib.figure.Figure.savefig

    def keep(fig, target, **kw):  # type: ignore[no-untyped-def]
        titles.extend(ax.get_title() for ax in fig.axes)
        return savefig(fig, target, **kw)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", keep)
    df = run_report([tmp_path], metric="test_accuracy")  # warnings are errors in this suite
    # the plot says what it compares (it had no title)
    assert titles == [f"{tmp_path.name} · sst_treelstm: test_accuracy, 3 runs"]
    assert df["test_accuracy"].tolist() == [0.50, 0.48, 0.40]
    summary = pd.read_csv(tmp_path / "summary.csv")
    assert summary["count"].tolist() == [2, 1]
    assert summary["mean"].iloc[0] == pytest.approx(0.49)
    assert (tmp_path / "report.png").stat().st_size > 0


def test_report_names_missing_metric(tmp_path: Path) -> None:
    _run(tmp_path, "0", 1, 0.5, [])
    with pytest.raises(ValueError, match="test_rmse"):
        run_report([tmp_path], metric="test_rmse")


@pytest.mark.parametrize(
    "content, expected",
    [
        ("[1, 2]", r"results\.json: expected a JSON object of a run's results, found list"),
        ('"text"', r"results\.json: expected a JSON object"),
        ('{"seed": 1, "test_accuracy": "abc"}', r"results\.json: test_accuracy='abc' is not a"),
        ('{"seed": 1, "test_accuracy": true}', r"results\.json: test_accuracy=True is not a"),
    ],
)
def test_report_names_a_results_file_it_cannot_use(
    tmp_path: Path, content: str, expected: str
) -> None:
    _run(tmp_path, "0", 1, 0.5, [])
    (tmp_path / "1").mkdir()
    write_text(tmp_path / "1" / "results.json", content, checksum=True)
    with pytest.raises(ValueError, match=str(tmp_path / "1") + "/" + expected):
        run_report([tmp_path])


@pytest.mark.parametrize(
    "content, args",
    [("[1, 2]", []), ('{"test_accuracy": "abc"}', []), ('{"test_accuracy": 1}', ["--metric", "x"])],
)
def test_report_command_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, args: list[str]
) -> None:
    write_text(tmp_path / "results.json", content, checksum=True)
    with pytest.raises(SystemExit) as exit_:
        main(["report", str(tmp_path), *args])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("foldexp report: error: ") and len(err.splitlines()) == 1


def _scored(root: Path, name: str, **results: object) -> None:
    d = root / name
    d.mkdir(parents=True)
    write_text(d / "results.json", json.dumps({"config": {}, **results}), checksum=True)


@pytest.mark.parametrize(
    ("select", "mode", "metric", "values", "best"),
    [  # molecule regression (it failed: no test_accuracy), classification, an older run
        ("dev_rmse", "min", "test_rmse", [0.9, 0.5, 0.7], 0.5),
        ("dev_roc_auc", "max", "test_roc_auc", [0.6, 0.8, 0.7], 0.8),
        ("dev_mse", None, "test_mse", [0.3, 0.1, 0.2], 0.1),  # no select_mode: mse is an error
    ],
)
def test_report_defaults_to_the_runs_selection_and_its_direction(
    select: str, mode: str | None, metric: str, values: list[float], best: float, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    for k, value in enumerate(values):
        extra = {"select_mode": mode} if mode else {}
        _scored(tmp_path, str(k), seed=k, select_metric=select, **extra, **{metric: value})
    assert main(["report", str(tmp_path)]) == 0
    table = pd.read_csv(tmp_path / "report.csv")
    assert table[metric].iloc[0] == best  # the best run first
    smaller = best == min(values)
    assert f"{metric}: {'smaller' if smaller else 'larger'} is better" in capsys.readouterr().out
    # --metric alone keeps the direction its name or the runs' selection give
    assert main(["report", str(tmp_path), "--metric", metric]) == 0
    assert pd.read_csv(tmp_path / "report.csv")[metric].iloc[0] == best
    assert main(["report", str(tmp_path), "--metric", metric, "--descending"]) == 0
    assert pd.read_csv(tmp_path / "report.csv")[metric].iloc[0] == max(values)


def test_runs_selecting_on_different_metrics_need_one_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _scored(tmp_path, "a", select_metric="dev_rmse", test_rmse=0.5)
    _scored(tmp_path, "b", select_metric="dev_accuracy", test_accuracy=0.5)
    with pytest.raises(SystemExit) as exit_:
        main(["report", str(tmp_path)])
    assert exit_.value.code == 2
    assert "differ in select_metric (dev_accuracy, dev_rmse): choose the metric to compare with " \
        "--metric" in capsys.readouterr().err  # fmt: skip


def test_a_trained_run_says_its_selection_for_the_report(tiny: list[str], tmp_path: Path) -> None:
    from foldexp.train.app import compose_config
    from foldexp.train.loop import run_train

    overrides = [
        *tiny,
        "trainer.epochs=1",
        "trainer.select_metric=dev_loss",
        "trainer.select_mode=min",
    ]
    results = run_train(compose_config(overrides, tmp_path / "run"))
    assert (results["select_metric"], results["select_mode"]) == ("dev_loss", "min")
    assert list(run_report([tmp_path])["test_loss"]) == [results["test_loss"]]


def test_the_plot_title_counts_the_runs_it_plots(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import matplotlib.figure

    _scored(tmp_path, "a", seed=1, test_rmse=0.5)
    _scored(tmp_path, "b", seed=2, test_rmse=0.7)
    _scored(tmp_path, "c", seed=3, test_mae=0.1)  # no test_rmse: in no bar
    titles: list[str] = []
    savefig = matplotlib.figure.Figure.savefig

    def keep(fig, target, **kw):  # type: ignore[no-untyped-def]
        titles.extend(ax.get_title() for ax in fig.axes)
        return savefig(fig, target, **kw)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", keep)
    run_report([tmp_path], metric="test_rmse")
    assert titles == [f"{tmp_path.name}: test_rmse, 2 runs of 3"]  # it said 3 runs
