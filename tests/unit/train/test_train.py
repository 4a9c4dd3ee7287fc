"""``run_train`` on tiny synthetic data: artifacts, determinism, resume after a kill, NaN stop,
config validation."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from foldexp.config import CONF_DIR
from foldexp.config.errors import ConfigError
from foldexp.train.app import compose_config
from foldexp.train.loop import TrainingDiverged, run_train

TINY = [
    "dataset.n=300",
    "trainer.epochs=2",
    "trainer.batch_size=16",
    "trainer.progress=false",
    "trainer.plots=false",
    "model.hidden_size=16",
    "model.embed_size=8",
]


def _strip(results: dict) -> dict:
    return {k: v for k, v in results.items() if k not in ("train_seconds", "config")}


def test_run_writes_artifacts_and_learns(tmp_path: Path) -> None:
    cfg = compose_config([*TINY, "trainer.epochs=3", "trainer.plots=true"], tmp_path)
    results = run_train(cfg)
    assert (tmp_path / "checkpoints" / "best.pt").exists()
    assert (tmp_path / "checkpoints" / "last.pt").exists()
    assert (tmp_path / "accuracy.png").exists() and (tmp_path / "loss.png").exists()
    metrics = pd.read_csv(tmp_path / "metrics.csv")
    assert list(metrics["epoch"]) == [0, 1, 2]
    assert {"train_loss", "dev_loss", "dev_accuracy", "dev_node_accuracy"} <= set(metrics.columns)
    assert metrics["train_loss"].iloc[-1] < metrics["train_loss"].iloc[0]
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["test_accuracy"] == pytest.approx(results["test_accuracy"])
    assert saved["best_epoch"] == int(metrics["dev_accuracy"].idxmax())
    payload = torch.load(tmp_path / "checkpoints" / "last.pt", weights_only=True)
    assert payload["progress"]["epoch"] == 3


def test_same_seed_same_result(tmp_path: Path) -> None:
    a = run_train(compose_config([*TINY, "model.dropout=0.3"], tmp_path / "a"))
    b = run_train(compose_config([*TINY, "model.dropout=0.3"], tmp_path / "b"))
    c = run_train(compose_config([*TINY, "model.dropout=0.3", "seed=7"], tmp_path / "c"))
    assert _strip(a) == _strip(b)
    assert (
        pd.read_csv(tmp_path / "a" / "metrics.csv")
        .drop(columns="epoch_seconds")
        .equals(pd.read_csv(tmp_path / "b" / "metrics.csv").drop(columns="epoch_seconds"))
    )
    assert a["test_loss"] != c["test_loss"]


def test_resume_after_kill_matches_uninterrupted_run(tmp_path: Path) -> None:
    args = [
        *TINY,
        "dataset.n=1500",
        "trainer.epochs=3",
        "trainer.checkpoint_every=5",
        "model.dropout=0.2",
    ]
    reference = run_train(compose_config(args, tmp_path / "ref"))

    run_dir = tmp_path / "killed"
    cmd = [sys.executable, "-m", "foldexp", "train", *args, f"hydra.run.dir={run_dir}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    last = run_dir / "checkpoints" / "last.pt"
    deadline = time.time() + 120
    while not last.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert last.exists(), "the run died before its first checkpoint"
    killed_at = torch.load(last, weights_only=True)["progress"]

    resumed = run_train(compose_config([*args, "trainer.resume=true"], run_dir))
    assert _strip(resumed) == _strip(reference), (
        f"killed at {killed_at['epoch']}/{killed_at['batch']}"
    )


def test_nan_loss_stops_with_message_and_keeps_checkpoint(tmp_path: Path, monkeypatch) -> None:
    from foldexp.models.tree_lstm import TreeLSTMClassifier

    real = TreeLSTMClassifier.forward
    calls = {"n": 0}

    def poisoned(self, batch):  # type: ignore[no-untyped-def]
        out = real(self, batch)
        calls["n"] += self.training  # training steps only: the run also scores a dev batch first
        if self.training and calls["n"] > 3:
            out["loss"] = out["loss"] * float("nan")
        return out

    monkeypatch.setattr(TreeLSTMClassifier, "forward", poisoned)
    cfg = compose_config([*TINY, "trainer.checkpoint_every=1"], tmp_path)
    with pytest.raises(TrainingDiverged, match=r"loss became nan at epoch 0, step 4.*last\.pt"):
        run_train(cfg)
    progress = torch.load(tmp_path / "checkpoints" / "last.pt", weights_only=True)["progress"]
    assert progress["step"] == 3


@pytest.mark.parametrize(
    "override, message",
    [
        ("trainer.epoch=3", "epoch"),
        ("trainer.epochs=three", "epochs"),
        ("device.name=gpu", "gpu"),
        ("dataset.max_depth=deep", "max_depth"),
        ("experiment=sst_treelstm dataset.view=medium", "medium"),
    ],
)
def test_config_errors_fail_at_compose_time(override: str, message: str, tmp_path: Path) -> None:
    with pytest.raises(Exception, match=message):
        compose_config(override.split(), tmp_path)


PRESETS = sorted(p.stem for p in (Path(CONF_DIR) / "experiment").glob("*.yaml"))


def test_the_presets_are_found() -> None:
    assert "calc_treelstm" in PRESETS and "sst_treelstm_glove" in PRESETS


@pytest.mark.parametrize("name", PRESETS)
def test_every_experiment_composes(name: str, tmp_path: Path, compose_or_skip) -> None:
    cfg = compose_or_skip([f"experiment={name}"], tmp_path)
    assert cfg.task_name == name
    assert cfg.dataset._target_ and cfg.model._target_


def test_cuda_requested_without_gpu_fails_before_work(tmp_path: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(ConfigError, match="device.name=cuda but torch sees no CUDA device"):
        run_train(compose_config([*TINY, "device=cuda"], tmp_path))
    assert not (tmp_path / "checkpoints").exists()


@pytest.mark.parametrize("command", ["train", "bench"])
def test_cuda_without_gpu_is_one_line_with_status_2(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It was a RuntimeError: a traceback, status 1."""
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    from foldexp.cli import main

    with pytest.raises(SystemExit) as exit_:
        main([command, "device=cuda", f"hydra.run.dir={tmp_path}"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"foldexp {command}: error: ") and "no CUDA device" in err
    assert len(err.splitlines()) == 1 and "Traceback" not in err


def test_workers_build_schedules_with_same_result(tmp_path: Path) -> None:
    a = run_train(compose_config(TINY, tmp_path / "a"))
    b = run_train(compose_config([*TINY, "trainer.num_workers=2"], tmp_path / "b"))
    assert _strip(a) == _strip(b)


def test_embedding_has_its_own_learning_rate(tmp_path: Path) -> None:
    from hydra.utils import instantiate

    from foldexp.train.optim import param_groups

    cfg = compose_config(
        [*TINY, "model.embedding_lr=0.5", "model.embedding_weight_decay=0"], tmp_path
    )
    bundle = instantiate(cfg.dataset, _convert_="all")
    model = instantiate(cfg.model, **bundle.info, _convert_="all")
    groups = param_groups(model, 0.01)
    assert [g["lr"] for g in groups] == [0.01, 0.5] and groups[1]["weight_decay"] == 0
    assert groups[1]["params"] == [model.embedding.weight]
    n = sum(p.numel() for g in groups for p in g["params"])
    assert n == sum(p.numel() for p in model.parameters())
    run_train(cfg)  # and the optimizer takes the groups
