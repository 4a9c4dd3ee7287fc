"""A training run's intra-op thread count: chosen once from the machine, written down, kept.

The count decides how torch splits each op's float sums, so it is part of what a run *is*: the
same config, seed and count give the same ``metrics.csv``, ``results.json`` and checkpoints
whatever else runs on the machine. Hence:

- ``device.threads=N`` is taken as it is;
- left ``null``, the count follows ``foldexp/cpus.py``'s rule: this process's share of the CPUs
  it may use (after the DDP ranks on this machine and a sweep's parallel jobs, and its own
  DataLoader workers), at most one thread per ``WORK_PER_THREAD`` multiply-adds of a step
  (``step_work``: the model's dense weights times the nodes of a batch). Never the load.
- ``trainer.resume=true`` continues on the run's own count, read from its ``run_info.json``;
  a ``device.threads`` that names another count is refused in one line, since the resumed run
  would no longer equal an uninterrupted one.

The count goes into the run's resolved config (``device.threads``, which checkpoints and
``run_info.json`` store), and as ``threads`` into ``run_info.json`` and ``results.json``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from foldexp.blocks import Embedding
from foldexp.config.errors import ConfigError
from foldexp.config.settings import DeviceSettings, TrainerSettings
from foldexp.cpus import available_cpus, cpu_share, threads_for
from foldexp.train import distributed as dd
from foldexp.train.artifacts import read_verified_json
from foldexp.train.runs import RUN_INFO
from foldexp.train.sampler import example_sizes

__all__ = ["dense_weights", "step_work", "sweep_jobs", "run_threads"]

log = logging.getLogger("foldexp.train")

SIZE_SAMPLE = 1000  # examples whose mean size stands for the training set's


def dense_weights(model: torch.nn.Module) -> int:
    """Entries of ``model``'s matrices that every node multiplies through: its parameters of
    two or more dimensions, less embedding tables (a step reads a few of their rows)."""
    tables = {
        id(m.weight)
        for m in model.modules()
        if isinstance(m, (Embedding, torch.nn.Embedding, torch.nn.EmbeddingBag))
        and isinstance(getattr(m, "weight", None), torch.Tensor)
    }
    return sum(p.numel() for p in model.parameters() if p.dim() >= 2 and id(p) not in tables)


def step_work(model: torch.nn.Module, examples: Sequence[Any], batch_size: int) -> float:
    """Multiply-adds of one training step, roughly: dense weights x nodes per batch (the mean
    size of the first ``SIZE_SAMPLE`` examples, ``sampler.example_sizes``, times the batch)."""
    sizes = example_sizes(model, examples[:SIZE_SAMPLE]) if len(examples) else [1]
    return dense_weights(model) * batch_size * sum(sizes) / len(sizes)


def sweep_jobs() -> int:
    """Jobs a Hydra sweep runs side by side in this command (the joblib launcher's ``n_jobs``;
    -1 and below count back from the CPUs, as joblib does); 1 outside such a sweep."""
    try:
        from hydra.core.hydra_config import HydraConfig

        launcher = HydraConfig.get().launcher
    except (ImportError, ValueError, AttributeError):  # not under Hydra's app (tests, the API)
        return 1
    n_jobs = launcher.get("n_jobs") if "joblib" in str(launcher.get("_target_", "")) else None
    if not isinstance(n_jobs, int) or n_jobs == 0:
        return 1
    return n_jobs if n_jobs > 0 else max(1, available_cpus() + 1 + n_jobs)


def _local_processes(ctx: dd.DistContext) -> int:
    """Processes of this command on this machine: its DDP ranks here times its sweep jobs."""
    from foldexp.train.launch import env_count

    return env_count("LOCAL_WORLD_SIZE", ctx.world_size) * sweep_jobs()


def _run_count(out_dir: Path) -> int | None:
    """The count the run in ``out_dir`` trained on, from its ``run_info.json`` (``None`` for a
    run written before counts were recorded)."""
    path = out_dir / RUN_INFO
    if not path.is_file():
        return None
    threads = read_verified_json(path).get("threads")
    if threads is None:
        return None
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise ConfigError(f"{path}: threads={threads!r}; expected a whole number >= 1")
    return threads


def _chosen(
    device: DeviceSettings,
    tc: TrainerSettings,
    ctx: dd.DistContext,
    model: torch.nn.Module,
    train: Any,
) -> int:
    requested = device.threads
    share = cpu_share(available_cpus(), _local_processes(ctx), tc.num_workers)
    if requested is None:
        return threads_for(share, step_work(model, train, tc.batch_size))
    if requested > share:
        log.warning(
            "device.threads=%d exceeds this process's share of the CPUs it may use (%d, after "
            "the other processes of this command and its DataLoader workers)",
            *(requested, share),
        )
    return requested


def run_threads(
    device: DeviceSettings,
    tc: TrainerSettings,
    ctx: dd.DistContext,
    model: torch.nn.Module,
    train: Any,
    out_dir: Path,
) -> int:
    """The run's intra-op thread count (see the module docstring), the same on every rank."""
    count: Any = None
    if ctx.is_main:
        try:
            resumed = _run_count(out_dir) if tc.resume else None
            if resumed is not None and device.threads not in (None, resumed):
                raise ConfigError(
                    f"trainer.resume=true but the run in {out_dir} trained on {resumed} "
                    f"thread(s) and device.threads={device.threads}: resume with "
                    f"device.threads={resumed} (or leave it out) for the run's own numbers"
                )
            count = resumed if resumed is not None else _chosen(device, tc, ctx, model, train)
        except (ConfigError, OSError, ValueError) as exc:
            count = exc
    count = dd.broadcast(ctx, count)
    if isinstance(count, Exception):
        raise count
    return int(count)
