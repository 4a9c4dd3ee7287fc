"""``run_train(cfg)``: the training loop behind ``foldexp train``.

Builds the dataset and model from their ``_target_`` configs, trains with per-epoch dev
evaluation, keeps the best checkpoint by ``trainer.select_metric``, stops early on patience,
evaluates the best checkpoint on test and returns the final metrics (also in ``results.json``).

Batches are traced and scheduled by ``model.collate`` inside DataLoader workers
(``trainer.num_workers``), so the next batch's schedule is built while the current one trains; the
loaders and their workers last the whole run (``loaders.py``), so workers keep their trace caches.
A killed run continues with ``trainer.resume=true`` from ``checkpoints/last.pt`` and ends with
the same result as an uninterrupted run: the data order depends only on (seed, epoch), the
position inside the epoch is saved, and so is every RNG (``resume.py``). Dev and test
evaluation and the best-epoch choice are in ``evaluate.py``.

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
import logging
import os
import time
from pathlib import Path
from typing import Any

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from foldexp.config import enum_value
from foldexp.kernels import keep_freed_memory, set_onednn_enabled
from foldexp.train import distributed as dd
from foldexp.train.artifacts import plot_curves, read_verified_json, write_json, write_metrics_csv
from foldexp.train.build import build_dataset, build_model, write_run_info
from foldexp.train.checkpoint import load_checkpoint, read_checkpoint, seed_everything
from foldexp.train.distill import teacher_targets
from foldexp.train.ema import ParamAverage
from foldexp.train.evaluate import evaluate, improves, progress_bar
from foldexp.train.loaders import RunLoaders
from foldexp.train.loggers import ProgressLog, RunLoggers
from foldexp.train.optim import build_optimizer, param_groups
from foldexp.train.preflight import check_bundle, resolve_selection
from foldexp.train.resume import restore_run, run_config, save_run, seed_rank
from foldexp.train.rundir import claim_run_dir, repair_metrics
from foldexp.train.sampler import ShardedBatchSampler, example_sizes
from foldexp.validate import check_config, plain

__all__ = ["run_train", "TrainingDiverged", "resolve_device"]

log = logging.getLogger("foldexp.train")


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite; the last good checkpoint is kept."""


def resolve_device(name: str) -> torch.device:
    """``cpu`` | ``cuda`` | ``auto`` → a device; ``cuda`` without a GPU fails at once."""
    name = enum_value(name)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(
            "device.name=cuda but torch sees no CUDA device; use device=cpu or device=auto"
        )
    return torch.device(name)


def _check_teachers(model_cfg: Any) -> None:
    """A distillation preset must name its teachers, and they must exist."""
    teachers = model_cfg.get("teacher")
    if teachers is not None and not teachers:  # a distillation preset, its teachers not given
        raise ValueError(
            "model.teacher=[] names no teacher: give the teachers' run or sweep folders, e.g. "
            "'model.teacher=[outputs/fold_sweep]'"
        )
    for path in teachers or []:
        if not Path(path).exists():
            raise FileNotFoundError(f"model.teacher: {path} does not exist")


def _diverged(loss: torch.Tensor, epoch: int, step: int, last: Path, model: Any) -> str:
    """What went wrong and what to do: finite weights mean the batch itself gave the
    non-finite loss (its data or the loss), where a learning-rate cut would not help."""
    where = f"the last good checkpoint is {last if last.exists() else 'not written yet'}"
    if all(torch.isfinite(p).all() for p in model.parameters()):
        advice = (
            "every weight is still finite, so this batch's inputs or targets give the "
            "non-finite value: check the data for NaN, inf or huge numbers"
        )
    else:
        advice = "the weights diverged: lower optimizer.lr or set trainer.grad_clip"
    return f"loss became {loss.item()} at epoch {epoch}, step {step}; {where} ({advice})"


def run_train(cfg: DictConfig) -> dict[str, Any]:
    """Trains the configured model; returns the final metrics (best dev, test).

    With ``trainer.strategy=ddp`` and ``trainer.processes=N>1`` outside a launcher, spawns N
    ranks here and returns rank 0's ``results.json``; under torchrun (or a multi-task submitit
    job) this process is one of the ranks.
    """
    tc = cfg.trainer
    check_config(cfg)
    strategy = plain(tc.strategy)
    _check_teachers(cfg.model)
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
        return read_verified_json(Path(cfg.paths.output_dir) / "results.json")
    device = resolve_device(cfg.device.name)
    if world == 1:
        with claim_run_dir(cfg, dd.DistContext()):  # locks the run folder for the run's life
            return _train(cfg, dd.DistContext(), device)
    ctx, device = dd.setup(device)
    try:
        with claim_run_dir(cfg, ctx):
            return _train(cfg, ctx, device)
    finally:
        dd.teardown()


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

    bundle = build_dataset(cfg.dataset)
    log.info("dataset %s: %s", cfg.dataset.name, bundle.sizes())
    check_bundle(bundle, cfg)
    model = build_model(cfg.model, bundle.info).to(device)
    if ctx.is_main:
        write_run_info(out_dir, cfg, bundle.info)
    if getattr(model, "teacher", None):
        targets = teacher_targets(list(model.teacher), bundle.train, tc.eval_batch_size)
        model.set_soft_targets(targets)
        log.info("model.teacher: soft targets for %d distinct nodes", len(targets))
    optimizer = build_optimizer(instantiate(cfg.optimizer), param_groups(model, cfg.optimizer.lr))
    select, mode = resolve_selection(model, bundle, cfg)
    better = max if mode == "max" else min
    balance = plain(tc.balance)
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
        seed_rank(cfg.seed, ctx.rank)
    # Evaluation (and best.pt) use the parameter average when there is one (``ema.py``).
    ema = ParamAverage(model, tc.ema_decay) if tc.ema_decay else None
    states = {"ema": ema} if ema is not None else {}
    config = run_config(cfg)  # stored in every checkpoint; a resume must match it
    restored = restore_run(ctx, last, model, optimizer, states, config) if tc.resume else None
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
        save_run(ctx, path, model, optimizer, progress, states, config)

    loaders = RunLoaders(model, tc.num_workers, cfg.seed)
    run_log = RunLoggers(cfg, out_dir, progress["step"], ctx.is_main)
    run_title = f"{cfg.get('task_name', 'train')} · {out_dir.resolve().name} (seed {cfg.seed})"
    if resumed and run_log.csv:  # a kill between last.pt and metrics.csv left the CSV short
        repair_metrics(out_dir, progress["history"], tc.plots)
    if ctx.is_main:
        log.info("run folder: %s", out_dir)
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
        bar = progress_bar(
            loader,
            tc.progress and ctx.is_main,
            desc=f"epoch {epoch}",
            total=progress["batch"] + len(sampler),
            initial=progress["batch"],
        )
        ticker = ProgressLog(
            tc.log_every_s if ctx.is_main else 0, progress["batch"] + len(sampler), epoch
        )
        t_ready = time.perf_counter()
        for batch, shard in zip(bar, sampler.shards):
            t0 = time.perf_counter()
            out = net(batch)
            loss = out["loss"]
            if not torch.isfinite(loss):
                raise TrainingDiverged(_diverged(loss, epoch, progress["step"] + 1, last, model))
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
            loss_value = loss.item()
            if hasattr(bar, "set_postfix"):
                bar.set_postfix(loss=f"{loss_value:.4f}")
            run_log.step(progress["step"], loss_value)
            ticker.update(progress["batch"], loss_value)
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
            if improves(row, select, better, progress, epoch):
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
        run_log.epoch(row)
        if run_log.csv:
            write_metrics_csv(out_dir / "metrics.csv", progress["history"])
            if tc.plots:
                plot_curves(out_dir / "metrics.csv", out_dir, run_title, progress["best_epoch"])

    if progress["stopped"]:
        log.info("stopped early: %s", progress["stopped"])
    if not ctx.enabled:
        load_checkpoint(ckpt_dir / "best.pt", model, restore_rng=False)
    else:
        best = read_checkpoint(ckpt_dir / "best.pt")["model"] if ctx.is_main else None
        model.load_state_dict(dd.broadcast(ctx, best))
    results: dict[str, Any] = {
        "best_epoch": progress["best_epoch"],
        f"best_{select}": progress["best"],
        "select_metric": select,
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
    run_log.close()
    if ctx.is_main:
        write_json(out_dir / "results.json", results)
        log.info("run folder: %s", out_dir)
    log.info(
        "test: %s",
        ", ".join(
            f"{k}={v:.4f}"
            for k, v in results.items()
            if k.startswith("test_") and isinstance(v, float)
        ),
    )
    return results
