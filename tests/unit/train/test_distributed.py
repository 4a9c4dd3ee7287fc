"""Data-parallel training on 2 CPU processes (gloo on loopback): the shards, the equivalence with
one process trained on the union of the ranks' batches, resume after a kill, the rank CSV."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from foldexp.train.app import compose_config
from foldexp.train.loop import run_train
from foldexp.train.sampler import ShardedBatchSampler, example_sizes, partition

# SGD, not Adam: Adam divides out the gradient's scale and would hide a wrong loss weighting.
TINY = [
    "dataset.n=300",
    "trainer.epochs=1",
    "trainer.batch_size=16",
    "trainer.progress=false",
    "trainer.plots=false",
    "model.hidden_size=16",
    "model.embed_size=8",
    "optimizer=sgd",
    "device.threads=1",
]
DDP = ["trainer.strategy=ddp", "trainer.processes=2"]


def _strip(results: dict) -> dict:
    return {k: v for k, v in results.items() if k not in ("train_seconds", "config", "world_size")}


def _params(run_dir: Path) -> dict[str, torch.Tensor]:
    return torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)["model"]


# --- shards -------------------------------------------------------------------------------


def test_partition_balances_nodes_and_covers_the_batch() -> None:
    sizes = [1, 50, 3, 40, 2, 2, 30, 9, 1, 20]
    parts = partition(sizes, 2, "nodes")
    assert sorted(parts[0] + parts[1]) == list(range(len(sizes)))
    loads = [sum(sizes[i] for i in p) for p in parts]
    assert abs(loads[0] - loads[1]) <= max(sizes)
    assert loads == [79, 79]  # LPT: 50+20+9 | 40+30+3+2+2+1+1
    assert partition(sizes, 2, "examples") == [[0, 2, 4, 6, 8], [1, 3, 5, 7, 9]]
    assert partition(sizes, 1, "nodes") == [list(range(len(sizes)))]
    with pytest.raises(ValueError, match="trainer.balance"):
        partition(sizes, 2, "depth")


@pytest.mark.parametrize("balance", ["nodes", "examples"])
def test_rank_shards_union_is_the_single_process_batch(balance: str) -> None:
    order = list(torch.randperm(37, generator=torch.Generator().manual_seed(3)))
    sizes = [1 + (7 * i) % 13 for i in range(37)]
    single = ShardedBatchSampler(order, 8, sizes)
    ranks = [ShardedBatchSampler(order, 8, sizes, r, 2, balance) for r in range(2)]
    assert len(single) == len(ranks[0]) == len(ranks[1]) == 5
    for whole, a, b in zip(single, ranks[0], ranks[1]):
        assert sorted(a + b) == sorted(whole) and not set(a) & set(b)
    resumed = ShardedBatchSampler(order, 8, sizes, 1, 2, balance, start=2, limit=4)
    assert list(resumed) == list(ranks[1])[2:4]


def test_short_last_batch_pads_the_empty_rank_with_weight_zero() -> None:
    sampler = ShardedBatchSampler(list(range(9)), 4, [1] * 9, rank=1, world=2)
    last = sampler.shards[-1]  # the 9th example alone: rank 0 has it, rank 1 pads
    assert (last.indices, last.examples, last.total) == ([8], 0, 1)
    eval_sampler = ShardedBatchSampler(list(range(9)), 4, [1] * 9, 1, 2, pad=False)
    assert len(eval_sampler) == 2


def test_example_sizes_use_the_model_hook_then_tree_size() -> None:
    from foldexp.data.trees import Tree

    trees = [Tree(0, "a"), Tree(1, children=(Tree(0, "a"), Tree(0, "b")))]
    assert example_sizes(object(), trees) == [1, 3]
    assert example_sizes(object(), [(1, 2), (3,)]) == [1, 1]

    class Model:
        def example_size(self, x: tuple) -> int:
            return len(x)

    assert example_sizes(Model(), [(1, 2), (3,)]) == [2, 1]


def test_bad_strategy_fails_at_compose_time(tmp_path: Path) -> None:
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException, match="trainer.strategy=horovod") as err:
        compose_config([*TINY, "trainer.strategy=horovod"], tmp_path)
    assert "expected one of [single, ddp]" in str(err.value.__cause__)


def test_torchrun_env_without_ddp_strategy_fails(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match="add trainer.strategy=ddp"):
        run_train(compose_config(TINY, tmp_path))


# --- two processes ------------------------------------------------------------------------


def test_two_processes_match_one_process_on_the_union(tmp_path: Path) -> None:
    """K=6 SGD steps of 15 examples: the ranks hold unequal example counts, so this also checks
    the loss weighting (an unweighted DDP average would differ from the union's mean loss)."""
    args = [*TINY, "trainer.max_steps=6", "trainer.batch_size=15"]
    one = run_train(compose_config(args, tmp_path / "one"))
    two = run_train(compose_config([*args, *DDP], tmp_path / "two"))

    ranks = pd.read_csv(tmp_path / "two" / "ranks.csv")
    assert sorted(ranks["step"].unique()) == list(range(1, 7))
    per_step = ranks.pivot(index="step", columns="rank", values="examples")
    assert (per_step.sum(axis=1) == 15).all()  # the union is the single-process batch
    assert (per_step[0] != per_step[1]).all()

    a, b = _params(tmp_path / "one"), _params(tmp_path / "two")
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=1e-5, atol=1e-6, msg=name)
    assert two["world_size"] == 2 and two["steps"] == one["steps"] == 6
    for key in ("test_loss", "best_dev_accuracy", "test_accuracy", "test_node_accuracy"):
        assert two[key] == pytest.approx(one[key], rel=1e-5), key
    metrics = pd.read_csv(tmp_path / "two" / "metrics.csv")
    assert {"rank_imbalance", "node_imbalance", "sync_wait_share"} <= set(metrics.columns)
    assert metrics["node_imbalance"].iloc[0] >= 1.0


def _session_alive(sid: int) -> list[int]:
    """Processes of session ``sid`` (the killed run and anything it started)."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            pids.append(int(stat.parent.name))
    return pids


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_killed_two_process_run_resumes_to_the_uninterrupted_result(tmp_path: Path) -> None:
    args = [
        *TINY,
        *DDP,
        "dataset.n=500",
        "trainer.epochs=2",
        "trainer.checkpoint_every=4",
        "model.dropout=0.2",  # per-rank RNG streams must be saved and restored too
    ]
    reference = run_train(compose_config(args, tmp_path / "ref"))

    run_dir = tmp_path / "killed"
    cmd = [sys.executable, "-m", "foldexp", "train", *args, f"hydra.run.dir={run_dir}"]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    last = run_dir / "checkpoints" / "last.pt"
    deadline = time.time() + 120
    while not last.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)  # the launcher only: its ranks must die with it
    proc.wait()
    deadline = time.time() + 30
    while _session_alive(proc.pid) and time.time() < deadline:
        time.sleep(0.05)
    assert not _session_alive(proc.pid), "ranks outlived their killed launcher"
    assert last.exists(), "the run died before its first checkpoint"
    killed_at = torch.load(last, weights_only=True)["progress"]
    assert killed_at["step"] < reference["steps"]

    resumed = run_train(compose_config([*args, "trainer.resume=true"], run_dir))
    assert _strip(resumed) == _strip(reference), f"killed at step {killed_at['step']}"
    a, b = _params(tmp_path / "ref"), _params(run_dir)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert os.path.getsize(run_dir / "ranks.csv") > 0
