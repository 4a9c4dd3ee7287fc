"""``run_train(cfg)``: what ``foldexp train`` does, as a plain function returning the metrics.

``_train`` reads top to bottom: set up (the dataset and model that the config names, built by
``foldexp.experiments``; the optimizer; a resumed position), fit (``fit.py``: epochs with a dev
evaluation each, the best checkpoint kept by ``trainer.select_metric``, early stopping), test
the best checkpoint, and return the metrics (also written to ``results.json``).

Batches are traced and scheduled by ``model.collate`` inside DataLoader workers
(``trainer.num_workers``), so the next batch's schedule is built while the current one trains; the
loaders and their workers last the whole run (``loaders.py``), so workers keep their trace caches.
A killed run continues with ``trainer.resume=true`` from ``checkpoints/last.pt`` and ends with
the same result as an uninterrupted run: the data order depends only on (seed, epoch), the
position inside the epoch is saved, and so is every RNG (``checkpoint.py``).

``trainer.strategy=ddp`` trains data-parallel: ``launch.py`` gets the ranks, every rank runs
``_train``, and ``distributed.StepBook`` holds what differs (each rank collates its shard of
each global batch, ``sampler.py``; DDP averages the gradients; rank 0 alone logs and writes).
``trainer.batch_size`` is the global batch, so a step sees the same examples on any number of
processes; each rank's loss is weighted by its share of the batch's examples, so the averaged
gradient is the single-process gradient (the model's loss is taken to be a mean over the
batch's examples, as ``train_loss`` already takes it). Evaluation is sharded the same way and
the summed statistics are gathered.

The config is read once: ``run_train`` checks the composed config and turns it into
``RunSettings`` (``foldexp/config/settings.py``); below it each function takes the settings it
reads (``TrainerSettings``, ``DeviceSettings``, ...), never the composed config.

The loop knows no model's keys: it calls the model contract (``foldexp.models.contract``),
including the optional ``prepare_training`` hook through which a model takes what it needs from
the training data (distillation's soft targets, ``foldexp.models.distill``).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from pathlib import Path
from typing import Any

import torch
from hydra.utils import instantiate

from foldexp.config import enum_value
from foldexp.config import enum_value as plain
from foldexp.config.checks import check_config
from foldexp.config.errors import ConfigError
from foldexp.config.settings import ComposedConfig, DeviceSettings, RunSettings, run_settings
from foldexp.executor import resolve_compile_mode, set_compile_mode
from foldexp.experiments.build import build_dataset, build_model, check_vectors
from foldexp.kernels import configure_kernels, keep_freed_memory
from foldexp.train import distributed as dd
from foldexp.train import launch
from foldexp.train.artifacts import read_verified_json, trust_unverified, write_json
from foldexp.train.calibration import calibrate_best
from foldexp.train.checkpoint import (
    ProgressLimits,
    load_best,
    restore_run,
    seed_everything,
    seed_rank,
)
from foldexp.train.ema import ParamAverage
from foldexp.train.fit import TrainingDiverged, TrainingRun, evaluate_split, fit, new_progress
from foldexp.train.held_out import write_test_predictions
from foldexp.train.loaders import RunLoaders
from foldexp.train.loggers import RunLoggers
from foldexp.train.lr_schedule import LRScheduler
from foldexp.train.optim import build_optimizer, param_groups
from foldexp.train.preflight import check_bundle, check_model_memory, resolve_selection
from foldexp.train.rundir import claim_run_dir, repair_metrics
from foldexp.train.runs import RunSetup, prepare_for_training, write_run_info
from foldexp.train.sampler import example_sizes
from foldexp.train.sparse_rows import use_sparse_table_gradients
from foldexp.train.task_table import compact_metrics, write_task_table
from foldexp.train.threads import run_threads

__all__ = ["run_train", "train_settings", "TrainingDiverged", "resolve_device"]

log = logging.getLogger("foldexp.train")


def resolve_device(name: str) -> torch.device:
    """``cpu`` | ``cuda`` | ``auto`` → a device; ``cuda`` without a GPU fails at once."""
    name = enum_value(name)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():  # the config's, not a bug: one line
        raise ConfigError(
            "device.name=cuda but torch sees no CUDA device; use device=cpu or device=auto"
        )
    return torch.device(name)


def run_train(cfg: ComposedConfig) -> dict[str, Any]:
    """Trains the configured model; returns the final metrics (best dev, test).

    With ``trainer.strategy=ddp`` and ``trainer.processes=N>1`` outside a launcher, spawns N
    ranks here and returns rank 0's ``results.json``; under torchrun (or a multi-task submitit
    job) this process is one of the ranks. A run folder's file without its checksum, or unlike
    it (the checkpoint resumed, a teacher's), is refused unless ``trainer.trust_unverified``.
    """
    check_config(cfg)
    return train_settings(run_settings(cfg))


def train_settings(settings: RunSettings) -> dict[str, Any]:
    """``run_train`` from settings already checked and converted (``run_settings``); what
    each DDP rank spawned here runs."""
    with trust_unverified(settings.trainer.trust_unverified, "trainer.trust_unverified=true"):
        return _run_train(settings)


def _run_train(cfg: RunSettings) -> dict[str, Any]:
    tc = cfg.trainer
    strategy = plain(tc.strategy)
    launch.export_submitit_env()  # a submitit job of several tasks: they are the ranks
    world = launch.launched_world_size()
    if world > 1 and strategy != "ddp":
        raise ValueError(
            f"this process is one of WORLD_SIZE={world} ranks (torchrun or a multi-task job) "
            "but trainer.strategy=single: add trainer.strategy=ddp"
        )
    if strategy == "ddp" and world == 1 and tc.processes > 1:
        resolve_device(cfg.device.name)  # fail here, not in N processes
        launch.spawn(train_settings, cfg, tc.processes)
        return read_verified_json(Path(cfg.paths.output_dir) / "results.json")
    device = resolve_device(cfg.device.name)
    if world == 1:
        with claim_run_dir(cfg, dd.DistContext()):  # locks the run folder for the run's life
            return _train(cfg, dd.DistContext(), device)
    ctx, device = launch.setup(device)
    try:
        with claim_run_dir(cfg, ctx):
            return _train(cfg, ctx, device)
    finally:
        launch.teardown()


def _train(cfg: RunSettings, ctx: dd.DistContext, device: torch.device) -> dict[str, Any]:
    """One rank's run: set up, fit, test, return the metrics."""
    _configure_process(cfg.device)
    dd.check_global_batch(ctx, cfg.trainer.batch_size)
    out_dir = Path(cfg.paths.output_dir)
    if ctx.is_main:
        out_dir.mkdir(parents=True, exist_ok=True)
    seed_everything(cfg.seed)  # the same on every rank: identical initial parameters

    cfg, bundle, model, lr_schedule = _build(cfg, ctx, device, out_dir)
    run = _start(cfg, ctx, device, out_dir, bundle, model)
    run.lr_schedule = lr_schedule
    started = time.perf_counter()
    fit(run)
    results = _test(run, cfg, started)

    run.loaders.close()
    run.run_log.results(results)  # TensorBoard's HParams: this run's config and scores
    run.run_log.close()
    if ctx.is_main:
        write_json(out_dir / "results.json", results)
        table = write_task_table(out_dir, results, bundle.info, bundle.test)
        if len(table) > 3:  # several targets: the table rather than a line of them
            log.info("test per target (results.md, per_task.csv):\n%s", "\n".join(table))
        tc = cfg.trainer  # each test molecule's predictions, and their plots (held_out.py)
        write_test_predictions(out_dir, run.model, bundle.test, bundle.info,
                               tc.eval_batch_size, tc.plots)  # fmt: skip
        log.info("run folder: %s", out_dir)
    tested = {k: v for k, v in results.items() if k.startswith("test_")}
    log.info("test: %s", compact_metrics(tested, run.tasks, "results.md"))
    return results


def _configure_process(device_cfg: DeviceSettings) -> None:
    """oneDNN, fused cells, the allocator, as ``device.*`` asks; and until the run's thread
    count is chosen (``_set_threads``, once the model is built), one thread: what runs before
    (reading the data, building the model) then does not depend on the machine either."""
    try:
        flushing = configure_kernels(
            device_cfg.onednn, device_cfg.fused_cells, device_cfg.flush_denormal
        )
    except RuntimeError as err:  # device.fused_cells=true where the kernels cannot be built
        raise ConfigError(str(err)) from None
    setting = enum_value(device_cfg.compile) if device_cfg.compile is not None else None
    chosen = set_compile_mode(resolve_compile_mode(setting, enum_value(device_cfg.name)))
    log.info("device.compile: %s", chosen)
    if device_cfg.flush_denormal and not flushing:
        log.info("device.flush_denormal: this CPU has no flush-to-zero mode")
    if device_cfg.keep_memory and not keep_freed_memory():
        log.info("device.keep_memory: not glibc, freed memory is managed as usual")
    torch.set_num_threads(1)


def _set_threads(
    cfg: RunSettings, ctx: dd.DistContext, model: torch.nn.Module, train: Any, out_dir: Path
) -> RunSettings:
    """Chooses the run's intra-op thread count (``threads.py``), sets it; the settings with it
    as ``device.threads``, which checkpoints and ``run_info.json`` store."""
    threads = run_threads(cfg.device, cfg.trainer, ctx, model, train, out_dir)
    torch.set_num_threads(threads)
    if ctx.is_main:
        log.info(
            "%d intra-op thread(s) (device.threads=%d repeats this run's numbers)", *[threads] * 2
        )
    return cfg.with_threads(threads)


def _build(
    cfg: RunSettings, ctx: dd.DistContext, device: torch.device, out_dir: Path
) -> tuple[RunSettings, Any, torch.nn.Module, LRScheduler | None]:
    """The dataset and model the config names, checked, and the model prepared for training;
    the learning-rate schedule over the dataset's steps (a warm-up past the run's end fails
    here, before the model is built); the settings with the run's thread count."""
    bundle = build_dataset(cfg.dataset)
    log.info("dataset %s: %s", cfg.dataset["name"], bundle.sizes())
    check_bundle(bundle, cfg.dataset)
    lr_schedule = LRScheduler.from_config(cfg.trainer, len(bundle.train))
    check_vectors(cfg.dataset, cfg.model, bundle.info)
    check_model_memory(cfg.model, bundle.info, device)
    model = build_model(cfg.model, bundle.info).to(device)
    cfg = _set_threads(cfg, ctx, model, bundle.train, out_dir)
    if ctx.is_main:
        write_run_info(out_dir, _absolute_data_paths(cfg), bundle.info, cfg.device.threads)
    prepare_for_training(model, RunSetup(bundle.train, cfg.trainer.eval_batch_size))
    return cfg, bundle, model, lr_schedule


_DATA_PATH_KEYS = ("path", "word_vectors")  # files the dataset reads, relative to the cwd


def _absolute_data_paths(cfg: RunSettings) -> dict[str, Any]:
    """The run's plain config with the dataset's files as absolute paths, for
    ``run_info.json``: ``foldexp eval RUN`` from another folder reads the same files. A path
    that does not exist from here stays as it is (the dataset resolved it some other way)."""
    out = cfg.plain_config()
    for key in _DATA_PATH_KEYS:
        value = out["dataset"].get(key)
        if isinstance(value, str) and value and not os.path.isabs(value):
            if os.path.exists(value):
                out["dataset"][key] = os.path.abspath(value)
    return out


def _start(
    cfg: RunSettings,
    ctx: dd.DistContext,
    device: torch.device,
    out_dir: Path,
    bundle: Any,
    model: torch.nn.Module,
) -> TrainingRun:
    """Optimizer, selection metric, parameter average, the position (fresh or resumed), the
    DDP bookkeeping, the loaders and the loggers: everything ``fit`` needs."""
    tc = cfg.trainer
    # plain lists, not ListConfigs (Adam's betas): the state dict goes into weights-only checkpoints
    make = instantiate(dataclasses.asdict(cfg.optimizer), _convert_="all")
    optimizer = build_optimizer(make, param_groups(model, cfg.optimizer.lr))
    sparse = use_sparse_table_gradients(model, optimizer, tc.grad_clip, ctx.world_size)
    if sparse and ctx.is_main:
        log.info(
            "sparse gradients (only the rows read; the same updates to rounding) for: %s",
            ", ".join(sparse),
        )
    select, mode = resolve_selection(model, bundle, tc)
    # Example sizes balance the shards; a single process needs none.
    splits = {"train": bundle.train, "dev": bundle.dev, "test": bundle.test}
    sizes = {k: example_sizes(model, v) if ctx.enabled else None for k, v in splits.items()}
    if ctx.rank:
        seed_rank(cfg.seed, ctx.rank)
    ema = ParamAverage(model, tc.ema_decay) if tc.ema_decay else None
    config = cfg.plain_config()  # stored in every checkpoint; a resume must match it
    restored = _resume(cfg, ctx, out_dir, model, optimizer, ema, config, len(bundle.train))
    progress = restored if restored is not None else new_progress()
    csv = out_dir / "ranks.csv"
    book = dd.StepBook(ctx, model, tc.find_unused_parameters, csv, fresh=restored is None)
    loaders = RunLoaders(model, tc.num_workers, cfg.seed)
    run_log = RunLoggers(cfg.logger, config, out_dir, progress["step"], ctx.is_main)
    if restored is not None and run_log.csv:  # a kill between last.pt and metrics.csv
        repair_metrics(out_dir, progress["history"], tc.plots)
    if ctx.is_main:
        log.info("run folder: %s", out_dir)
    return TrainingRun(
        trainer=tc,
        seed=cfg.seed,
        ctx=ctx,
        device=device,
        out_dir=out_dir,
        bundle=bundle,
        model=model,
        optimizer=optimizer,
        select=select,
        better=max if mode == "max" else min,
        sizes=sizes,
        progress=progress,
        ema=ema,
        config=config,
        book=book,
        loaders=loaders,
        run_log=run_log,
        title=_title(cfg, out_dir),
    )


def _title(cfg: RunSettings, out_dir: Path) -> str:
    """The plots' title: the data (its file, for a dataset read from one), the model, the run."""
    path = cfg.dataset.get("path")
    data = Path(str(path)).name if path else cfg.dataset.get("name", "data")
    model = cfg.model.get("name", "model")
    return f"{data} · {model} · {out_dir.resolve().name} (seed {cfg.seed})"


def _resume(
    cfg: RunSettings,
    ctx: dd.DistContext,
    out_dir: Path,
    model: torch.nn.Module,
    optimizer: Any,
    ema: ParamAverage | None,
    config: dict[str, Any],
    examples: int,
) -> dict[str, Any] | None:
    """With ``trainer.resume``, the position ``last.pt`` saved (model, optimizer and RNGs
    restored), or ``None`` to start afresh; ``examples``: the training set's size, which
    bounds the position's batch."""
    if not cfg.trainer.resume:
        return None
    last = out_dir / "checkpoints" / "last.pt"
    states = {"ema": ema} if ema is not None else {}
    tc = cfg.trainer
    limits = ProgressLimits.of(tc.epochs, examples, tc.batch_size, tc.limit_batches)
    restored = restore_run(ctx, last, model, optimizer, states, config, limits)
    if restored is None:
        log.info("trainer.resume=true but %s does not exist: starting afresh", last)
    else:
        log.info(
            "resumed from %s at epoch %d, batch %d", last, restored["epoch"], restored["batch"]
        )
    return restored


def _test(run: TrainingRun, cfg: RunSettings, started: float) -> dict[str, Any]:
    """The best checkpoint scored on test, with what the run was."""
    progress = run.progress
    load_best(run.ctx, run.best, run.model)
    calibration = calibrate_best(run)  # a model's optional hook (uncertainty), on dev
    return {
        "best_epoch": progress["best_epoch"],
        f"best_{run.select}": progress["best"],
        "select_metric": run.select,
        "select_mode": "min" if run.better is min else "max",  # foldexp report's order
        **calibration,
        **evaluate_split(run, "test"),
        "epochs_run": len(progress["history"]),
        "steps": progress["step"],
        "train_seconds": time.perf_counter() - started,
        "seed": cfg.seed,
        "experiment": cfg.task_name,
        "dataset": cfg.dataset["name"],
        "model": cfg.model["name"],
        "world_size": run.ctx.world_size,
        "threads": torch.get_num_threads(),
        "config": cfg.plain_config(),
    }
