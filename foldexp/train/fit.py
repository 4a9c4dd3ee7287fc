"""``fit(run)``: the epochs of a training run, each a pass over the training set and a dev score.

A step calls the model only through its contract (``foldexp.models.contract``): ``forward`` on
a collated batch gives the loss and the statistics to sum, ``summarize`` turns an epoch's sums
into metrics. What differs under DDP (the wrapped model, the weighted backward, the per-rank
ledger) is ``distributed.StepBook``. The data order depends only on (seed, epoch) and the
position inside the epoch is saved with every checkpoint, so a resumed run continues exactly
where it stopped. Each epoch ends with a dev evaluation (``evaluate.py``, with the parameter
average when there is one), ``best.pt`` when the selection metric improves, ``last.pt``, and a
row of ``metrics.csv``; patience and ``max_steps`` stop early.

On a GPU the loop does not wait for the device at every step: each step's loss and outputs stay
there (``StepReadout``) and are read back together every ``STEPS_PER_READ`` steps or
``SECONDS_PER_READ`` seconds, before any checkpoint and at the epoch's end; the NaN check then
names the first step whose loss was not finite. On the CPU (and under DDP, whose ledger times
each step) they are read at every step, where reading costs no wait, and a non-finite loss
stops the run before its update.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from foldexp.config import enum_value as plain
from foldexp.config.settings import TrainerSettings
from foldexp.train import distributed as dd
from foldexp.train.artifacts import restorable
from foldexp.train.checkpoint import save_run
from foldexp.train.curves import per_task_due, plot_curves, write_metrics_csv
from foldexp.train.ema import ParamAverage
from foldexp.train.evaluate import evaluate, improves
from foldexp.train.loaders import RunLoaders
from foldexp.train.loggers import ProgressLog, RunLoggers, progress_bar
from foldexp.train.lr_schedule import LRScheduler
from foldexp.train.sampler import ShardedBatchSampler
from foldexp.train.task_table import compact_metrics, target_suffixes

__all__ = ["TrainingDiverged", "TrainingRun", "evaluate_split", "fit", "new_progress"]

log = logging.getLogger("foldexp.train")


# How often a GPU run reads its steps' losses back (``StepReadout``): often enough for a
# progress line, seldom enough that the CPU queues many steps' work ahead of the device.
STEPS_PER_READ = 16
SECONDS_PER_READ = 1.0


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite; the last good checkpoint is kept."""


def read_every(device: torch.device, ctx: dd.DistContext) -> int:
    """Steps between read-backs: 1 on the CPU and under DDP, ``STEPS_PER_READ`` otherwise."""
    return 1 if device.type == "cpu" or ctx.enabled else STEPS_PER_READ


@dataclass
class _Pending:
    """A step whose loss and outputs are still on the device."""

    epoch: int
    step: int
    batch: int
    out: dict[str, Any]
    size: int
    shard: Any
    times: tuple[float, float, float, float, float]


class StepReadout:
    """The steps not yet read back; ``read`` takes them all in one wait for the device."""

    def __init__(self, every: int) -> None:
        self.every = every
        self.pending: list[_Pending] = []
        self.last = time.perf_counter()

    def add(self, step: _Pending) -> bool:
        """Queues a step; returns whether it is time to read back."""
        self.pending.append(step)
        return (
            len(self.pending) >= self.every or time.perf_counter() - self.last >= SECONDS_PER_READ
        )

    def read(self, run: TrainingRun, bar: Any, ticker: ProgressLog) -> None:
        """Checks, sums and logs the queued steps in their order.

        Raises:
            TrainingDiverged: naming the first step whose loss was not finite.
        """
        pending, self.pending, self.last = self.pending, [], time.perf_counter()
        if not pending:
            return
        outs = dd.read_scalars([p.out for p in pending])
        losses = [float(out["loss"]) for out in outs]
        for k, (p, out, value) in enumerate(zip(pending, outs, losses)):
            if not math.isfinite(value):
                later = len(pending) - 1 - k if self.every > 1 else None
                raise TrainingDiverged(_diverged(value, p.epoch, p.step, run, later))
            run.book.record(run.progress, out, p.size, p.shard, p.times)
            run.run_log.step(p.step, value)
            ticker.update(p.batch, value)
        if hasattr(bar, "set_postfix"):
            bar.set_postfix(loss=f"{losses[-1]:.4f}")


def new_progress() -> dict[str, Any]:
    """Where a fresh run stands: what every checkpoint saves and a resume restores."""
    return {
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


@dataclass
class TrainingRun:
    """Everything one rank's run holds between setup and test (built by ``loop.py``)."""

    trainer: TrainerSettings
    seed: int  # the run's seed: with the epoch, it orders the epoch's examples
    ctx: dd.DistContext
    device: torch.device
    out_dir: Path
    bundle: Any  # the dataset: train, dev and test examples and their ``info``
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    select: str  # the dev column that picks the best epoch
    better: Callable[..., Any]  # max or min
    sizes: dict[str, list[int] | None]  # example sizes per split (DDP balances shards by them)
    progress: dict[str, Any]
    ema: ParamAverage | None
    config: dict[str, Any]  # the resolved config every checkpoint stores
    book: dd.StepBook
    loaders: RunLoaders
    run_log: RunLoggers
    title: str  # the plots' title
    lr_schedule: LRScheduler | None = None  # the learning rate per step (trainer.lr_schedule)

    @property
    def tasks(self) -> list[str]:
        """The targets' metric suffixes (``task_table``): per-target metrics have them."""
        return target_suffixes(self.bundle.info.get("target_names") or [])

    @property
    def units(self) -> list[str] | None:
        """Each target's units (``dataset.units``), for the regression plots' axes."""
        return self.bundle.info.get("target_units")

    @property
    def last(self) -> Path:
        return self.out_dir / "checkpoints" / "last.pt"

    @property
    def best(self) -> Path:
        return self.out_dir / "checkpoints" / "best.pt"

    def checkpoint(self, path: Path) -> None:
        states = {"ema": self.ema} if self.ema is not None else {}
        save_run(self.ctx, path, self.model, self.optimizer, self.progress, states, self.config)


def fit(run: TrainingRun) -> None:
    """Trains until ``trainer.epochs``, patience or ``trainer.max_steps`` stops the run."""
    progress, tc = run.progress, run.trainer
    while progress["epoch"] < tc.epochs and not progress["stopped"]:
        t_epoch = _train_epoch(run)
        _end_epoch(run, t_epoch)
    if progress["stopped"]:
        log.info("stopped early: %s", progress["stopped"])


def _train_epoch(run: TrainingRun) -> float:
    """One pass over this rank's share of the training set, from the saved position; returns
    when the epoch began."""
    progress, tc, ctx = run.progress, run.trainer, run.ctx
    epoch = progress["epoch"]
    order = torch.randperm(
        len(run.bundle.train), generator=torch.Generator().manual_seed(run.seed * 1000 + epoch)
    ).tolist()
    sampler = ShardedBatchSampler(
        order,
        tc.batch_size,
        run.sizes["train"] or [1] * len(run.bundle.train),
        ctx.rank,
        ctx.world_size,
        plain(tc.balance),
        start=progress["batch"],
        limit=tc.limit_batches,
    )
    loader = run.loaders.get("train", run.bundle.train, sampler)
    run.book.net.train()
    t_epoch = time.perf_counter()
    n_before = progress["epoch_n"]
    total = progress["batch"] + len(sampler)
    shown = tc.progress and ctx.is_main
    bar = progress_bar(loader, shown, desc=f"epoch {epoch}", total=total, initial=progress["batch"])
    ticker = ProgressLog(tc.log_every_s if ctx.is_main else 0, total, epoch)
    readout = StepReadout(read_every(run.device, ctx))
    t_ready = time.perf_counter()
    for batch, shard in zip(bar, sampler.shards):
        if _step(run, batch, shard, t_ready, (readout, bar, ticker)):
            break
        t_ready = time.perf_counter()
    readout.read(run, bar, ticker)
    run.book.sync(progress)
    train_s = time.perf_counter() - t_epoch
    trained = progress["epoch_n"] - n_before
    speed = trained / max(train_s, 1e-9)
    log.info(
        "epoch %d: trained %d examples in %.2f s: %.1f examples/s over %d process(es)",
        *(epoch, trained, train_s, speed, ctx.world_size),
    )
    return t_epoch


def _step(
    run: TrainingRun,
    batch: Any,
    shard: Any,
    t_ready: float,
    reporting: tuple[StepReadout, Any, ProgressLog],
) -> bool:
    """One optimizer step on one batch; returns whether ``trainer.max_steps`` is reached."""
    progress, tc = run.progress, run.trainer
    readout, bar, ticker = reporting
    t0 = time.perf_counter()
    out = run.book.net(batch)
    loss = out["loss"]
    if readout.every == 1 and not torch.isfinite(loss):  # no wait here: before its update
        raise TrainingDiverged(_diverged(loss.item(), progress["epoch"], progress["step"] + 1, run))
    t1 = time.perf_counter()
    run.optimizer.zero_grad(set_to_none=True)
    run.book.backward(loss, shard)
    t2 = time.perf_counter()
    if tc.grad_clip:
        torch.nn.utils.clip_grad_norm_(run.model.parameters(), tc.grad_clip)
    if run.lr_schedule is not None:
        run.lr_schedule.set_for(run.optimizer, progress["step"])
    run.optimizer.step()
    if run.ema is not None:
        run.ema.update()
    t3 = time.perf_counter()
    progress["step"] += 1
    progress["batch"] += 1
    step = _Pending(
        progress["epoch"],
        progress["step"],
        progress["batch"],
        out,
        batch.size,
        shard,
        (t_ready, t0, t1, t2, t3),
    )
    checkpoint = bool(tc.checkpoint_every and progress["step"] % tc.checkpoint_every == 0)
    if readout.add(step) or checkpoint:
        readout.read(run, bar, ticker)
    if checkpoint:
        run.book.sync(progress)
        run.checkpoint(run.last)
    if tc.max_steps and progress["step"] >= tc.max_steps:
        progress["stopped"] = f"max_steps={tc.max_steps} reached"
        return True
    return False


def evaluate_split(run: TrainingRun, split: str) -> dict[str, Any]:
    """``dev_*`` or ``test_*`` metrics of the model as it is now, sharded over the ranks."""
    examples = getattr(run.bundle, split)
    return evaluate(
        run.model, examples, run.trainer, run.device, split, run.ctx, run.sizes[split], run.loaders
    )


def _diverged(
    value: float, epoch: int, step: int, run: TrainingRun, later: int | None = None
) -> str:
    """What went wrong and what to do: finite weights mean the batch itself gave the
    non-finite loss (its data or the loss), where a learning-rate cut would not help. ``later``:
    the steps run past the bad one before its loss was read back (a GPU run's read-back: its
    own update has run too); ``None``: caught before its update."""
    last = run.last
    where = f"the last good checkpoint is {last if last.exists() else 'not written yet'}"
    if all(torch.isfinite(p).all() for p in run.model.parameters()):
        advice = (
            "every weight is still finite, so this batch's inputs or targets give the "
            "non-finite value: check the data for NaN, inf or huge numbers"
        )
    elif later is not None:  # its own update (and later ones) may have made them so
        advice = (
            "the weights are no longer finite (its update and any later step's may have made "
            "them so): check the data for NaN, inf or huge numbers, or lower optimizer.lr or "
            "set trainer.grad_clip"
        )
    else:
        advice = "the weights diverged: lower optimizer.lr or set trainer.grad_clip"
    read = f" (read {later} step(s) later)" if later else ""
    return f"loss became {value} at epoch {epoch}, step {step}{read}; {where} ({advice})"


def _loop_cap_metrics(model: torch.nn.Module) -> dict[str, float]:
    """The epoch's share of each ``While`` / ``Unfold``'s instances stopped at its limit (its
    training and dev batches): ``capped_<loop>`` columns (``executor/loops.LoopCaps``)."""
    out: dict[str, float] = {}
    for m in model.modules():
        caps = getattr(m, "loop_caps", None)
        if caps is not None:
            caps.fractions(out)
    return out


def _report_loop_caps(model: torch.nn.Module, epoch: int) -> None:
    """Warns, once per epoch and loop, when a model's ``While`` or ``Unfold`` stopped more than a
    few percent of its instances at its limit (``executor/loops.LoopCaps``)."""
    for m in model.modules():
        caps = getattr(m, "loop_caps", None)
        if caps is not None:
            for line in caps.report():
                log.warning("epoch %d: %s", epoch, line)


def _end_epoch(run: TrainingRun, t_epoch: float) -> None:
    """Scores dev, keeps ``best.pt``, counts patience, writes ``last.pt`` and the epoch's row."""
    progress, tc = run.progress, run.trainer
    epoch = progress["epoch"]
    sums, n = progress["epoch_sums"], max(1, progress["epoch_n"])
    row: dict[str, Any] = {
        "epoch": epoch,
        "step": progress["step"],
        "train_loss": sums.get("loss", 0.0) / n,
        **{f"train_{k}": v for k, v in run.model.summarize(sums).items()},
    }
    if run.lr_schedule is not None:  # the rate of the epoch's last step (first group's)
        row["lr"] = float(run.optimizer.param_groups[0]["lr"])
    # A new best.pt stands only once last.pt of its epoch is written: a full disk (or any
    # failure) before then puts the previous one back, the one last.pt still names.
    with restorable(run.best) as keep_best:
        # Evaluation (and best.pt) use the parameter average when there is one (``ema.py``).
        with run.ema.applied() if run.ema is not None else contextlib.nullcontext():
            row.update(evaluate_split(run, "dev"))
            if improves(row, run.select, run.better, progress, epoch):
                if run.ctx.is_main:  # (the rank that writes it)
                    keep_best()
                run.checkpoint(run.best)  # the weights just evaluated
        row.update(_loop_cap_metrics(run.model))  # before the warning resets the counts
        row["epoch_seconds"] = time.perf_counter() - t_epoch
        row = run.book.end_epoch(row)  # every rank takes the same early-stopping decisions
        progress["history"].append(row)
        log.info("epoch %d: %s", epoch, compact_metrics(row, run.tasks))
        if progress["best_epoch"] != epoch:
            progress["bad_epochs"] += 1
            if tc.patience and progress["bad_epochs"] >= tc.patience:
                progress["stopped"] = f"no better {run.select} for {tc.patience} epochs"
        _report_loop_caps(run.model, epoch)
        progress.update(epoch=epoch + 1, batch=0, epoch_sums={}, epoch_n=0)
        run.checkpoint(run.last)
    run.run_log.epoch(row)
    if run.run_log.csv:  # (a resume rewrites it from last.pt when it is a row short)
        write_metrics_csv(run.out_dir / "metrics.csv", progress["history"])
        if tc.plots:
            best = progress["best_epoch"]
            # per_task.png after epochs 1, 2, 4, 8, ... and the last: its cost grows with targets
            tasks = per_task_due(epoch, tc.epochs, bool(progress.get("stopped")))
            plot_curves(
                run.out_dir / "metrics.csv",
                run.out_dir,
                run.title,
                best,
                run.tasks,
                run.units,
                per_task=tasks,
            )
