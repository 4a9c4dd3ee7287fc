"""The logger group: csv, tensorboard, none, several at once; progress lines in a log file."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from foldexp.train.app import compose_config
from foldexp.train.loop import run_train

TINY = [
    "dataset.n=60",
    "trainer.epochs=2",
    "trainer.batch_size=8",
    "trainer.progress=false",
    "trainer.plots=false",
    "model.hidden_size=8",
    "model.embed_size=4",
]


def _scalars(folder: Path) -> dict[str, list[float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder)).Reload()
    return {tag: [e.value for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def test_csv_and_tensorboard_together(tmp_path: Path) -> None:
    cfg = compose_config(
        [*TINY, "logger=[csv,tensorboard]", "logger.tensorboard.log_every_n_steps=1"], tmp_path
    )
    results = run_train(cfg)
    assert (tmp_path / "metrics.csv").exists()
    scalars = _scalars(tmp_path / "tensorboard")
    assert len(scalars["train/loss_step"]) == results["steps"]
    assert scalars["dev/accuracy"] and len(scalars["dev/accuracy"]) == 2  # one per epoch


def test_tensorboard_alone_writes_no_csv(tmp_path: Path) -> None:
    run_train(compose_config([*TINY, "logger=tensorboard"], tmp_path))
    assert not (tmp_path / "metrics.csv").exists()
    assert "train/loss" in _scalars(tmp_path / "tensorboard")


def test_none_writes_only_results_and_checkpoints(tmp_path: Path) -> None:
    run_train(compose_config([*TINY, "logger=none"], tmp_path))
    assert (tmp_path / "results.json").exists() and (tmp_path / "checkpoints" / "best.pt").exists()
    assert not (tmp_path / "metrics.csv").exists() and not (tmp_path / "tensorboard").exists()


def test_a_bad_logger_value_fails_at_compose_time(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"logger.tensorboard.log_every_n_steps=0"):
        compose_config([*TINY, "logger=tensorboard", "logger.tensorboard.log_every_n_steps=0"])


def test_progress_lines_and_the_run_folder_in_a_log_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)
    cfg = compose_config([*TINY, "trainer.log_every_s=0.000001"], tmp_path)
    with caplog.at_level(logging.INFO, logger="foldexp.train"):
        run_train(cfg)
    lines = [r.getMessage() for r in caplog.records]
    assert any(line.startswith("epoch 0: batch 2/") and "loss" in line for line in lines)
    folder = [line for line in lines if line == f"run folder: {tmp_path}"]
    assert len(folder) == 2  # at the start and at the end


def test_curves_name_the_run_mark_the_best_epoch_and_log_the_loss(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import matplotlib.pyplot as plt

    from foldexp.train.curves import plot_curves

    csv = tmp_path / "metrics.csv"
    csv.write_text(
        "epoch,train_loss,dev_loss,dev_accuracy\n0,2.0,2.1,0.3\n1,1.0,1.5,0.6\n2,0.5,1.6,0.5\n"
    )
    figures, real_close = [], plt.close
    monkeypatch.setattr(plt, "close", lambda fig: figures.append(fig))
    written = plot_curves(csv, tmp_path, title="calc · run7", best_epoch=1)
    assert sorted(p.name for p in written) == ["accuracy.png", "loss.png"]
    axes = {fig.axes[0].get_ylabel(): fig.axes[0] for fig in figures}
    assert axes["loss"].get_yscale() == "log" and axes["accuracy"].get_yscale() == "linear"
    for ax in axes.values():
        assert ax.get_title() == "calc · run7"
        assert "best (epoch 1)" in [t.get_text() for t in ax.get_legend().get_texts()]
    for fig in figures:
        real_close(fig)


def test_tensorboard_gets_each_runs_config_and_scores_as_hparams(tmp_path: Path) -> None:
    """A multirun browsed in TensorBoard's HParams view: each job writes its own session."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.plugins.hparams import plugin_data_pb2

    for lr in (0.05, 0.1):
        cfg = compose_config(
            [*TINY, "logger=tensorboard", f"optimizer.lr={lr}"], tmp_path / str(lr)
        )
        results = run_train(cfg)
        sessions = []
        for path in (tmp_path / str(lr) / "tensorboard").glob("events.*"):
            for event in EventFileLoader(str(path)).Load():
                for value in event.summary.value:
                    if value.metadata.plugin_data.plugin_name == "hparams":
                        data = plugin_data_pb2.HParamsPluginData.FromString(
                            value.metadata.plugin_data.content
                        )
                        sessions.append(data)
        starts = [s.session_start_info for s in sessions if s.HasField("session_start_info")]
        assert len(starts) == 1
        hparams = starts[0].hparams
        assert hparams["optimizer.lr"].number_value == pytest.approx(lr)
        assert hparams["model.hidden_size"].number_value == 8
        assert hparams["dataset.name"].string_value == "calculator"
        experiment = [s.experiment for s in sessions if s.HasField("experiment")]
        metrics = {m.name.tag for m in experiment[0].metric_infos}
        assert {"hparam/test_accuracy", f"hparam/best_{results['select_metric']}"} <= metrics
