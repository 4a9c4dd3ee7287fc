"""Training, resuming, predicting and evaluating on CUDA (``gpu``: skipped without a GPU).

A short run of the default experiment on CUDA, cut after its first epoch and resumed, ends as
the uninterrupted CUDA run does (to float tolerance: CUDA's scatter-adds are not bit-for-bit
repeatable); a run's checkpoint moves between the CPU and CUDA both ways; every ``optimizer=``
group trains on CUDA; ``foldexp predict`` and ``eval`` read a CUDA run's folder (onto the CPU,
as a machine without a GPU does).
"""

from __future__ import annotations

import math
from functools import partial
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch

from foldexp.analysis.evaluate_run import run_eval
from foldexp.analysis.predict import run_predict
from foldexp.train.app import compose_config
from foldexp.train.loop import run_train
from foldexp.train.optim import build_optimizer, fused_kernel_available

pytestmark = pytest.mark.gpu


def _train(args: list[str], out: Path) -> dict[str, Any]:
    return run_train(compose_config(args, out))


def _close(a: dict[str, Any], b: dict[str, Any], rel: float = 1e-3) -> None:
    for key in sorted(set(a) & set(b)):
        if key.startswith(("test_", "best_dev_")) and isinstance(a[key], float):
            assert math.isclose(a[key], b[key], rel_tol=rel, abs_tol=1e-6), (key, a[key], b[key])


def test_a_cuda_run_cut_and_resumed_ends_as_the_uninterrupted_one(
    tiny: list[str], tmp_path: Path
) -> None:
    args = [*tiny, "device=cuda"]
    whole = _train([*args, "trainer.epochs=2"], tmp_path / "whole")
    _train([*args, "trainer.epochs=1"], tmp_path / "cut")
    resumed = _train([*args, "trainer.epochs=2", "trainer.resume=true"], tmp_path / "cut")
    _close(whole, resumed)
    assert len(pd.read_csv(tmp_path / "cut" / "metrics.csv")) == 2
    state = torch.load(tmp_path / "cut" / "checkpoints" / "last.pt", weights_only=True)
    assert "cuda" in state["rng"], "the CUDA generator's state is not in the checkpoint"


@pytest.mark.parametrize("first,second", [("cpu", "cuda"), ("cuda", "cpu")])
def test_a_checkpoint_moves_between_the_cpu_and_cuda(
    first: str, second: str, tiny: list[str], tmp_path: Path
) -> None:
    whole = _train([*tiny, f"device={first}", "trainer.epochs=2"], tmp_path / "whole")
    _train([*tiny, f"device={first}", "trainer.epochs=1"], tmp_path / "cut")
    resumed = _train(
        [*tiny, f"device={second}", "trainer.epochs=2", "trainer.resume=true"], tmp_path / "cut"
    )
    _close(whole, resumed, rel=1e-2)


@pytest.mark.parametrize("optimizer", ["adagrad", "adam", "adamw", "sgd"])
def test_every_optimizer_group_trains_on_cuda(
    optimizer: str, tiny: list[str], tmp_path: Path
) -> None:
    results = _train(
        [*tiny, "device=cuda", f"optimizer={optimizer}", "trainer.epochs=1"], tmp_path / "run"
    )
    assert all(math.isfinite(v) for k, v in results.items() if k.startswith("test_"))


@pytest.mark.parametrize(
    "cls", [torch.optim.Adagrad, torch.optim.Adam, torch.optim.AdamW, torch.optim.SGD]
)
def test_the_optimizers_cuda_steps_equal_their_cpu_steps(cls: type) -> None:
    torch.manual_seed(0)
    cpu = [torch.nn.Parameter(torch.randn(6, 5)), torch.nn.Parameter(torch.randn(5))]
    gpu = [torch.nn.Parameter(p.detach().cuda()) for p in cpu]
    opts = [build_optimizer(partial(cls, lr=0.1), [{"params": ps}]) for ps in (cpu, gpu)]
    assert bool(opts[1].param_groups[0].get("fused")) == fused_kernel_available(cls, "cuda")
    for _ in range(3):
        grads = [torch.randn_like(p) for p in cpu]
        for ps, opt in zip((cpu, gpu), opts):
            for p, g in zip(ps, grads):
                p.grad = g.to(p.device)
            opt.step()
    for a, b in zip(cpu, gpu):
        torch.testing.assert_close(b.detach().cpu(), a.detach(), rtol=1e-5, atol=1e-6)


def test_predict_and_eval_read_a_cuda_run(tmp_path: Path) -> None:
    smiles = ["CCO", "CCCC", "c1ccccc1", "CC(=O)O", "CCN", "OCCO", "c1ccncc1", "CC(C)O"] * 3
    data = tmp_path / "train.csv"
    data.write_text("smiles,size\n" + "".join(f"{s},{len(s) / 10:.1f}\n" for s in smiles))
    out = tmp_path / "run"
    sizes = ["atom_size=8", "pair_size=6", "graph_size=8", "mlp_size=8"]
    results = _train(
        [
            "experiment=molecules_csv",
            f"dataset.path={data}",
            "dataset.targets=[size]",
            "dataset.cache_dir=null",
            "device=cuda",
            "trainer.epochs=2",
            "trainer.batch_size=8",
            "trainer.progress=false",
            "trainer.plots=false",
            *(f"model.{s}" for s in sizes),
        ],
        out,
    )
    rows = run_predict(out, str(data), tmp_path / "out.csv")
    assert len(rows) == len(smiles) and (tmp_path / "out.csv").exists()
    scored = run_eval(out, split="test", run_paths=True)  # a run of our own: its files are read
    assert math.isclose(scored["test_rmse"], results["test_rmse"], rel_tol=1e-4), (
        scored,
        results,
    )


def test_device_auto_takes_cuda(tiny: list[str], tmp_path: Path) -> None:
    from foldexp.train.loop import resolve_device

    assert resolve_device("auto").type == "cuda"
    _train([*tiny, "device=auto", "trainer.epochs=1"], tmp_path / "run")


def test_the_attention_experiment_trains_on_cuda(tmp_path: Path) -> None:
    """Its statistics (the count within the tolerance) stay on the device with the loss."""
    sizes = ["n_train=24", "n_dev=8", "n_test=8", "min_len=4", "max_len=9"]
    args = ["experiment=addition_attention", "trainer.epochs=1", "trainer.batch_size=4"]
    args += ["trainer.progress=false", "trainer.plots=false", "model.hidden_size=8"]
    results = _train([*args, *(f"dataset.{s}" for s in sizes), "device=cuda"], tmp_path / "a")
    assert 0 <= results["test_accuracy"] <= 1 and math.isfinite(results["test_mse"])
