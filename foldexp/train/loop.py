"""``run_train(cfg)``: the training loop behind ``foldexp train``.

Builds the dataset and model from their ``_target_`` configs, trains with per-epoch dev
evaluation, keeps the best checkpoint by ``trainer.select_metric``, stops early on patience,
evaluates the best checkpoint on test and returns the final metrics (also in ``results.json``).

Batches are traced and scheduled by ``model.collate`` inside DataLoader workers
(``trainer.num_workers``), so the next batch's schedule is built while the current one trains; the
loaders and their workers last the whole run (``loaders.py``), so workers keep their trace caches.
A killed run continues with ``trainer.resume=true`` from ``checkpoints/last.pt`` and ends with
the same result as an uninterrupted run: the data order depends only on (seed, epoch), the
position inside the epoch is saved, and so is every RNG.

``trainer.strategy=ddp`` trains data-parallel (``foldexp/train/distributed.py``): every rank
collates its shard of each global batch (``foldexp/train/sampler.py``), DDP averages the
gradients, and rank 0 alone logs and writes. ``trainer.batch_size`` is the global batch, so a
step sees the same examples on any number of processes; each rank's loss is weighted by its
share of the batch's examples, so the averaged gradient is the single-process gradient (the
model's loss is taken to be a mean over the batch's examples, as ``train_loss`` already takes
it). Evaluation is sharded the same way and the summed statistics are gathered.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from foldexp.kernels import keep_freed_memory, set_onednn_enabled
from foldexp.train import distributed as dd
from foldexp.train.artifacts import plot_curves, write_json, write_metrics_csv
from foldexp.train.checkpoint import (
    load_checkpoint,
    load_payload,
    rng_state,
    save_checkpoint,
    seed_everything,
    set_rng_state,
)
from foldexp.train.ema import ParamAverage
from foldexp.train.loaders import RunLoaders
from foldexp.train.optim import build_optimizer
from foldexp.train.sampler import BALANCE_MODES, ShardedBatchSampler, example_sizes

__all__ = ["run_train", "TrainingDiverged", "resolve_device"]

log = logging.getLogger("foldexp.train")


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite; the last good checkpoint is kept."""


def resolve_device(name: str) -> torch.device:
    """``cpu`` | ``cuda`` | ``auto`` → a device; ``cuda`` without a GPU fails at once."""
    name = str(getattr(name, "value", name))
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(
            "device.name=cuda but torch sees no CUDA device; use device=cpu or device=auto"
        )
    return torch.device(name)


def _param_groups(model: Any, lr: float) -> list[dict[str, Any]]:
    """The optimizer's parameter groups: the model's own (``model.param_groups()``, each with
    optional ``lr`` and ``weight_decay``) or one group; frozen parameters left out."""
    groups = (
        model.param_groups()
        if hasattr(model, "param_groups")
        else [{"params": list(model.parameters())}]
    )
    out = []
    for g in groups:
        params = [p for p in g["params"] if p.requires_grad]
        if params:
            out.append({**g, "params": params, "lr": g.get("lr") or lr})
    return out


def _progress(it: Iterable[Any], enabled: bool, **kw: Any) -> Any:
    return tqdm(it, disable=not (enabled and sys.stderr.isatty()), leave=False, **kw)


def evaluate(
    model: Any,
    examples: list[Any],
    cfg: DictConfig,
    device: torch.device,
    prefix: str,
    ctx: dd.DistContext | None = None,
    sizes: list[int] | None = None,
    loaders: RunLoaders | None = None,
) -> dict[str, float]:
    """Mean loss and the model's metrics over ``examples``, without gradients.

    Under DDP each rank evaluates its shard of every batch and the sums are gathered.
    ``loaders`` keeps the split's loader (and its workers) from one call to the next.
    """
    ctx = ctx or dd.DistContext()
    tc = cfg.trainer
    model.eval()
    sums: dict[str, float] = {}
    n = 0
    sampler = ShardedBatchSampler(
        range(len(examples)),
        tc.eval_batch_size,
        sizes or [1] * len(examples),
        ctx.rank,
        ctx.world_size,
        str(tc.balance),
        limit=tc.limit_batches,
        pad=False,
    )
    loaders = loaders or RunLoaders(model, tc.num_workers, 0)
    loader = loaders.get(prefix, examples, sampler)
    with torch.no_grad():
        for batch in _progress(loader, tc.progress and ctx.is_main, desc=prefix):
            out = model(batch)
            n += batch.size
            dd.accumulate(sums, out, batch.size)
    if ctx.enabled:
        sums, n = dd.merge(dd.all_gather(ctx, (sums, n)))
    metrics = {"loss": sums.get("loss", 0.0) / max(1, n), **model.summarize(sums)}
    return {f"{prefix}_{k}": v for k, v in metrics.items()}


def _improves(
    row: dict[str, Any], select: str, better: Any, progress: dict[str, Any], epoch: int
) -> bool:
    """Whether ``row[select]`` beats the best so far; if so, records it as the best epoch."""
    if select not in row:
        raise KeyError(
            f"trainer.select_metric={select!r} is not a metrics.csv column; "
            f"columns are {sorted(row)}"
        )
    score = row[select]
    if progress["best"] is not None and better(score, progress["best"]) == progress["best"]:
        return False
    progress.update(best=score, best_epoch=epoch, bad_epochs=0)
    return True


def _check_choice(value: Any, choices: tuple[str, ...], key: str) -> str:
    value = str(getattr(value, "value", value))
    if value not in choices:
        raise ValueError(f"{key}={value!r}; expected one of {', '.join(choices)}")
    return value


def _check_dropouts(model_cfg: Any) -> None:
    """Every ``model.*dropout`` is a probability; fails before the data is loaded."""
    for key, value in model_cfg.items():
        if str(key).endswith("dropout") and value is not None and not 0.0 <= value < 1.0:
            raise ValueError(f"model.{key}={value}; expected a probability 0 <= p < 1")


def run_train(cfg: DictConfig) -> dict[str, Any]:
    """Trains the configured model; returns the final metrics (best dev, test).

    With ``trainer.strategy=ddp`` and ``trainer.processes=N>1`` outside a launcher, spawns N
    ranks here and returns rank 0's ``results.json``; under torchrun (or a multi-task submitit
    job) this process is one of the ranks.
    """
    tc = cfg.trainer
    strategy = _check_choice(tc.strategy, dd.STRATEGIES, "trainer.strategy")
    _check_choice(tc.balance, BALANCE_MODES, "trainer.balance")
    if not 0.0 <= tc.ema_decay < 1.0:
        raise ValueError(f"trainer.ema_decay={tc.ema_decay}; expected 0 <= decay < 1 (0: off)")
    _check_dropouts(cfg.model)
    dd.export_submitit_env()  # a submitit job of several tasks: they are the ranks
    world = dd.launched_world_size()
    if world > 1 and strategy != "ddp":
        raise ValueError(
            f"this process is one of WORLD_SIZE={world} ranks (torchrun or a multi-task job) "
            "but trainer.strategy=single: add trainer.strategy=ddp"
        )
    if strategy == "ddp" and world == 1 and tc.processes > 1:
        resolve_device(cfg.device.name)  # fail here, not in N processes
        dd.spawn(run_train, cfg, tc.processes)
        return json.loads((Path(cfg.paths.output_dir) / "results.json").read_text())
    device = resolve_device(cfg.device.name)
    if world == 1:
        return _train(cfg, dd.DistContext(), device)
    ctx, device = dd.setup(device)
    try:
        return _train(cfg, ctx, device)
    finally:
        dd.teardown()


def _restore(
    ctx: dd.DistContext,
    path: Path,
    model: torch.nn.Module,
    optimizer: Any,
    states: dict[str, Any],
) -> dict[str, Any] | None:
    """Loads ``path`` (model, optimizer, RNGs) if it exists; returns the saved progress.

    Under DDP rank 0 reads the file and broadcasts it, so the other ranks need no shared file
    system, and each rank takes back its own RNG state (``rank_rng``, saved by every DDP
    checkpoint); after a checkpoint from another number of processes the ranks above 0 keep
    their fresh seeds.
    """
    if not ctx.enabled:
        if not path.exists():
            return None
        progress = load_checkpoint(path, model, optimizer, states=states)
        progress.pop("rank_rng", None)
        return progress
    exists = ctx.is_main and path.exists()
    payload = torch.load(path, map_location="cpu", weights_only=True) if exists else None
    payload = dd.broadcast(ctx, payload)
    if payload is None:
        return None
    load_payload(path, payload, model, optimizer, states)
    progress = payload["progress"]
    rngs = progress.pop("rank_rng", None)
    if rngs and len(rngs) == ctx.world_size:
        set_rng_state(rngs[ctx.rank])
    elif not ctx.rank:
        set_rng_state(payload["rng"])
    return progress


def _seed_rank(seed: int, rank: int) -> None:
    """Each rank its own dropout masks; rank 0 keeps the single-process stream."""
    seed_everything(int(np.random.SeedSequence([seed, rank]).generate_state(1)[0]))


def _train(cfg: DictConfig, ctx: dd.DistContext, device: torch.device) -> dict[str, Any]:
    tc = cfg.trainer
    set_onednn_enabled(cfg.device.onednn)
    if cfg.device.keep_memory and not keep_freed_memory():
        log.info("device.keep_memory: not glibc, freed memory is managed as usual")
    if cfg.device.threads:
        torch.set_num_threads(cfg.device.threads)
        local = int(os.environ.get("LOCAL_WORLD_SIZE", ctx.world_size))
        if ctx.is_main and local * cfg.device.threads > (os.cpu_count() or 1):
            log.warning(
                "%d processes x device.threads=%d exceed the %d CPU cores: set device.threads=%d",
                local,
                cfg.device.threads,
                os.cpu_count(),
                max(1, (os.cpu_count() or 1) // local),
            )
    if ctx.enabled and tc.batch_size < ctx.world_size:
        raise ValueError(
            f"trainer.batch_size={tc.batch_size} is the global batch; it must hold at least one "
            f"example per process ({ctx.world_size})"
        )
    out_dir = Path(cfg.paths.output_dir)
    ckpt_dir = out_dir / "checkpoints"
    if ctx.is_main:
        out_dir.mkdir(parents=True, exist_ok=True)
    seed_everything(cfg.seed)  # the same on every rank: identical initial parameters

    bundle = instantiate(cfg.dataset, _convert_="all")
    log.info("dataset %s: %s", cfg.dataset.name, bundle.sizes())
    model = instantiate(cfg.model, **bundle.info, _convert_="all").to(device)
    optimizer = build_optimizer(instantiate(cfg.optimizer), _param_groups(model, cfg.optimizer.lr))
    select, better = (
        tc.select_metric,
        (max if str(getattr(tc.select_mode, "value", tc.select_mode)) == "max" else min),
    )
    balance = str(tc.balance)
    # Example sizes balance the shards; a single process needs none.
    sizes = {
        name: example_sizes(model, split) if ctx.enabled else None
        for name, split in (("train", bundle.train), ("dev", bundle.dev), ("test", bundle.test))
    }
    train_sizes = sizes["train"] or [1] * len(bundle.train)

    progress: dict[str, Any] = {
        "epoch": 0,
        "batch": 0,
        "step": 0,
        "best": None,
        "best_epoch": -1,
        "bad_epochs": 0,
        "history": [],
        "epoch_sums": {},
        "epoch_n": 0,
        "stopped": "",
    }
    last = ckpt_dir / "last.pt"
    if ctx.rank:
        _seed_rank(cfg.seed, ctx.rank)
    # Evaluation (and best.pt) use the parameter average when there is one (``ema.py``).
    ema = ParamAverage(model, tc.ema_decay) if tc.ema_decay else None
    states = {"ema": ema} if ema is not None else {}
    restored = _restore(ctx, last, model, optimizer, states) if tc.resume else None
    resumed = restored is not None
    if restored is not None:
        progress = restored
        log.info(
            "resumed from %s at epoch %d, batch %d", last, progress["epoch"], progress["batch"]
        )
    elif tc.resume:
        log.info("trainer.resume=true but %s does not exist: starting afresh", last)

    net: torch.nn.Module = model
    clock, ledger = None, None
    if ctx.enabled:
        net = dd.wrap(model, tc.find_unused_parameters)
        clock = dd.BucketClock(net)
        ledger = dd.RankLedger(ctx, out_dir / "ranks.csv", fresh=not resumed)

    def checkpoint(path: Path) -> None:
        if not ctx.enabled:
            save_checkpoint(path, model, optimizer, progress, states)
            return
        rngs = dd.all_gather(ctx, rng_state())
        if ctx.is_main:
            save_checkpoint(path, model, optimizer, {**progress, "rank_rng": rngs}, states)

    loaders = RunLoaders(model, tc.num_workers, cfg.seed)
    started = time.perf_counter()
    while progress["epoch"] < tc.epochs and not progress["stopped"]:
        epoch = progress["epoch"]
        order = torch.randperm(
            len(bundle.train), generator=torch.Generator().manual_seed(cfg.seed * 1000 + epoch)
        ).tolist()
        sampler = ShardedBatchSampler(
            order,
            tc.batch_size,
            train_sizes,
            ctx.rank,
            ctx.world_size,
            balance,
            start=progress["batch"],
            limit=tc.limit_batches,
        )
        loader = loaders.get("train", bundle.train, sampler)
        net.train()
        t_epoch = time.perf_counter()
        n_before = progress["epoch_n"]
        bar = _progress(
            loader,
            tc.progress and ctx.is_main,
            desc=f"epoch {epoch}",
            total=progress["batch"] + len(sampler),
            initial=progress["batch"],
        )
        t_ready = time.perf_counter()
        for batch, shard in zip(bar, sampler.shards):
            t0 = time.perf_counter()
            out = net(batch)
            loss = out["loss"]
            if not torch.isfinite(loss):
                raise TrainingDiverged(
                    f"loss became {loss.item()} at epoch {epoch}, step {progress['step'] + 1}; "
                    f"the last good checkpoint is {last if last.exists() else 'not written yet'}"
                    " (lower optimizer.lr or set trainer.grad_clip)"
                )
            t1 = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            if ctx.enabled:
                # DDP averages over ranks: weighting by this rank's share of the examples makes
                # the average the gradient of the loss over the whole global batch.
                (loss * (ctx.world_size * shard.examples / shard.total)).backward()
            else:
                loss.backward()
            t2 = time.perf_counter()
            if tc.grad_clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
            optimizer.step()
            if ema is not None:
                ema.update()
            t3 = time.perf_counter()
            progress["step"] += 1
            progress["batch"] += 1
            if ledger is None:
                progress["epoch_n"] += batch.size
                dd.accumulate(progress["epoch_sums"], out, batch.size)
            else:
                ready = clock.ready if clock and clock.ready > t1 else t2
                row = {
                    "epoch": epoch,
                    "step": progress["step"],
                    "examples": shard.examples,
                    "nodes": shard.nodes,
                    "data_s": t0 - t_ready,
                    "forward_s": t1 - t0,
                    "backward_s": ready - t1,  # until this rank's last gradient bucket
                    "wait_s": t2 - ready,  # for the all-reduce: the other ranks, the transfer
                    "optim_s": t3 - t2,
                    "step_s": t3 - t_ready,
                }
                ledger.add(out, batch.size, row)
            if hasattr(bar, "set_postfix"):
                bar.set_postfix(loss=f"{loss.item():.4f}")
            if tc.checkpoint_every and progress["step"] % tc.checkpoint_every == 0:
                if ledger:
                    ledger.sync(progress)
                checkpoint(last)
            if tc.max_steps and progress["step"] >= tc.max_steps:
                progress["stopped"] = f"max_steps={tc.max_steps} reached"
                break
            t_ready = time.perf_counter()

        if ledger:
            ledger.sync(progress)
        train_s = time.perf_counter() - t_epoch
        log.info(
            "epoch %d: trained %d examples in %.2f s: %.1f examples/s over %d process(es)",
            epoch,
            progress["epoch_n"] - n_before,
            train_s,
            (progress["epoch_n"] - n_before) / max(train_s, 1e-9),
            ctx.world_size,
        )
        sums, n = progress["epoch_sums"], max(1, progress["epoch_n"])
        row: dict[str, Any] = {
            "epoch": epoch,
            "step": progress["step"],
            "train_loss": sums.get("loss", 0.0) / n,
            **{f"train_{k}": v for k, v in model.summarize(sums).items()},
        }
        averaged = ema.applied() if ema is not None else contextlib.nullcontext()
        with averaged:
            row.update(evaluate(model, bundle.dev, cfg, device, "dev", ctx, sizes["dev"], loaders))
            if _improves(row, select, better, progress, epoch):
                checkpoint(ckpt_dir / "best.pt")  # the weights just evaluated
        row["epoch_seconds"] = time.perf_counter() - t_epoch
        if ledger:
            row.update(ledger.end_epoch())
            row = dd.broadcast(ctx, row)  # every rank takes the same early-stopping decisions
        progress["history"].append(row)
        log.info(
            "epoch %d: %s",
            epoch,
            ", ".join(f"{k}={v:.4f}" for k, v in row.items() if isinstance(v, float)),
        )
        if progress["best_epoch"] != epoch:
            progress["bad_epochs"] += 1
            if tc.patience and progress["bad_epochs"] >= tc.patience:
                progress["stopped"] = f"no better {select} for {tc.patience} epochs"
        progress.update(epoch=epoch + 1, batch=0, epoch_sums={}, epoch_n=0)
        checkpoint(last)
        if ctx.is_main:
            write_metrics_csv(out_dir / "metrics.csv", progress["history"])
            if tc.plots:
                plot_curves(out_dir / "metrics.csv", out_dir)

    if progress["stopped"]:
        log.info("stopped early: %s", progress["stopped"])
    if not ctx.enabled:
        load_checkpoint(ckpt_dir / "best.pt", model, restore_rng=False)
    else:
        best = (
            torch.load(ckpt_dir / "best.pt", map_location="cpu", weights_only=True)["model"]
            if ctx.is_main
            else None
        )
        model.load_state_dict(dd.broadcast(ctx, best))
    results: dict[str, Any] = {
        "best_epoch": progress["best_epoch"],
        f"best_{select}": progress["best"],
        **evaluate(model, bundle.test, cfg, device, "test", ctx, sizes["test"], loaders),
        "epochs_run": len(progress["history"]),
        "steps": progress["step"],
        "train_seconds": time.perf_counter() - started,
        "seed": cfg.seed,
        "experiment": cfg.get("task_name", "train"),
        "dataset": cfg.dataset.name,
        "model": cfg.model.name,
        "world_size": ctx.world_size,
        "config": OmegaConf.to_container(cfg, resolve=True),
    }
    loaders.close()
    if ctx.is_main:
        write_json(out_dir / "results.json", results)
    log.info(
        "test: %s",
        ", ".join(
            f"{k}={v:.4f}"
            for k, v in results.items()
            if k.startswith("test_") and isinstance(v, float)
        ),
    )
    return results
