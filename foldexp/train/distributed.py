"""Data-parallel training on ``torch.distributed``: process groups, DDP, spawn, collectives.

Three ways to get N ranks, one code path once they run (``run_train`` on every rank):

- ``trainer.strategy=ddp trainer.processes=N``: ``spawn`` starts N local processes with
  ``torch.multiprocessing`` on a free loopback port; the calling process only waits.
- ``torchrun ... -m foldexp train trainer.strategy=ddp`` (one node or many): torchrun sets
  ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``/``MASTER_ADDR``/``MASTER_PORT``; ``processes`` is
  ignored.
- a submitit job with several tasks (``hydra/launcher=submitit_slurm
  hydra.launcher.tasks_per_node=N``): ``export_submitit_env`` translates the job's tasks into
  the same variables with submitit's own helper.

The backend follows the device: ``nccl`` on CUDA (one GPU per local rank), ``gloo`` on CPU.
Rank 0 alone logs and writes files; the collectives here are per epoch or per checkpoint, never
per step (the only per-step communication is DDP's gradient all-reduce).
"""

from __future__ import annotations

import copy
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch
import torch.distributed as dist
from omegaconf import DictConfig, OmegaConf

__all__ = [
    "STRATEGIES",
    "RankLedger",
    "accumulate",
    "merge",
    "BucketClock",
    "DistContext",
    "all_gather",
    "broadcast",
    "export_submitit_env",
    "imbalance_summary",
    "launched_world_size",
    "setup",
    "spawn",
    "teardown",
    "wrap",
]

STRATEGIES = ("single", "ddp")

log = logging.getLogger("foldexp.train")


@dataclass(frozen=True)
class DistContext:
    """This process's place among the ranks (``world_size == 1``: not distributed)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str = ""

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def launched_world_size() -> int:
    """``WORLD_SIZE`` set by torchrun, ``spawn`` or ``export_submitit_env``; 1 when unset."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def export_submitit_env() -> bool:
    """Inside a submitit job of several tasks, exports ``RANK``, ``WORLD_SIZE``, … for env://.

    Returns whether it did. ``CUDA_VISIBLE_DEVICES`` is left alone: ``setup`` picks
    ``cuda:LOCAL_RANK`` as under torchrun.
    """
    if "SUBMITIT_EXECUTOR" not in os.environ or "RANK" in os.environ:
        return False
    import submitit

    if submitit.JobEnvironment().num_tasks <= 1:
        return False
    submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
    return True


def setup(device: torch.device) -> tuple[DistContext, torch.device]:
    """Joins the process group the environment describes; returns the context and the device.

    ``device`` is the configured one; on CUDA each local rank takes ``cuda:LOCAL_RANK``.
    """
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device.type == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, rank=rank, world_size=world)
    ctx = DistContext(rank, world, local_rank, backend)
    if not ctx.is_main:
        # Only rank 0 reports; the others keep their warnings and errors.
        logging.getLogger().setLevel(logging.WARNING)
    return ctx, device


def teardown() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def wrap(model: torch.nn.Module, find_unused_parameters: bool) -> torch.nn.Module:
    """``DistributedDataParallel`` over ``model`` (already on its device).

    ``device_ids`` stays unset on purpose: a batch is a schedule object, not tensors, and the
    model moves what it needs itself; DDP would otherwise walk the batch to copy it.
    """
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(model, find_unused_parameters=find_unused_parameters)


def broadcast(ctx: DistContext, obj: Any, src: int = 0) -> Any:
    """``obj`` from rank ``src`` on every rank (pickled: for per-epoch metadata, checkpoints)."""
    if not ctx.enabled:
        return obj
    box = [obj if ctx.rank == src else None]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def all_gather(ctx: DistContext, obj: Any) -> list[Any]:
    """Every rank's ``obj``, in rank order, on every rank."""
    if not ctx.enabled:
        return [obj]
    out: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(out, obj)
    return out


# --- spawning local processes -------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _logging_spec() -> dict[str, Any]:
    """The root logger's handlers as plain data, so spawned ranks log where the parent does."""
    root = logging.getLogger()
    handlers = []
    for h in root.handlers:
        fmt = h.formatter._fmt if h.formatter else None
        datefmt = h.formatter.datefmt if h.formatter else None
        if isinstance(h, logging.FileHandler):
            handlers.append({"file": h.baseFilename, "fmt": fmt, "datefmt": datefmt})
        elif isinstance(h, logging.StreamHandler):
            name = "stderr" if h.stream is sys.__stderr__ or h.stream is sys.stderr else "stdout"
            handlers.append({"stream": name, "fmt": fmt, "datefmt": datefmt})
    return {"level": root.level, "handlers": handlers}


def _configure_logging(spec: dict[str, Any], rank: int) -> None:
    root = logging.getLogger()
    root.setLevel(spec["level"] or logging.INFO)
    for h in spec["handlers"]:
        if rank and "file" in h:
            continue  # one log file, written by rank 0
        handler: logging.Handler = (
            logging.FileHandler(h["file"], mode="a")
            if "file" in h
            else logging.StreamHandler(getattr(sys, h["stream"]))
        )
        fmt = h["fmt"] or "%(message)s"
        handler.setFormatter(
            logging.Formatter(f"[rank {rank}]{fmt}" if rank else fmt, h["datefmt"])
        )
        root.addHandler(handler)


def _die_with_parent(parent: int) -> None:
    """A rank must not outlive the process that spawned it (e.g. after ``kill -9``): an orphan
    would go on training and overwrite the checkpoints of the run that resumes."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def _rank_main(
    rank: int,
    fn: Callable[[DictConfig], Any],
    cfg: DictConfig,
    world: int,
    port: int,
    log_spec: dict[str, Any],
    parent: int,
) -> None:
    _die_with_parent(parent)
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world),
    )
    _configure_logging(log_spec, rank)
    fn(cfg)


def spawn(fn: Callable[[DictConfig], Any], cfg: DictConfig, processes: int) -> None:
    """Runs ``fn(cfg)`` in ``processes`` new local processes as ranks 0..N-1 and waits.

    If one rank fails, torch stops the others and raises its traceback here. Interpolations
    (Hydra's run folder, ``now``) are resolved first: the new processes have no Hydra.
    """
    import torch.multiprocessing as mp

    cfg = copy.deepcopy(cfg)
    OmegaConf.resolve(cfg)
    port = _free_port()
    log.info("spawning %d ranks, rendezvous at 127.0.0.1:%d", processes, port)
    mp.start_processes(
        _rank_main,
        args=(fn, cfg, processes, port, _logging_spec(), os.getpid()),
        nprocs=processes,
        join=True,
        start_method="spawn",
    )


# --- per-rank step timing -----------------------------------------------------------------


class BucketClock:
    """Notes when this rank's last gradient bucket became ready in a backward pass.

    Registered as DDP's communication hook (it then runs torch's own ``allreduce_hook``), it
    splits a backward pass into local compute (until the last bucket is ready) and waiting (for
    the all-reduce, i.e. for the slowest rank plus the transfer): the imbalance measurement.
    """

    def __init__(self, ddp: torch.nn.Module) -> None:
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        self.ready = 0.0
        self._allreduce = allreduce_hook

        # No annotations: DDP compares them with dist.GradBucket, and this module's are strings.
        def hook(state, bucket):  # type: ignore[no-untyped-def]
            self.ready = time.perf_counter()
            return self._allreduce(state, bucket)

        ddp.register_comm_hook(None, hook)


def accumulate(sums: dict[str, Any], out: dict[str, Any], size: int) -> None:
    """Adds a batch's outputs to running sums: the loss weighted by the batch's examples (it is
    a mean over them), every other scalar output (already a sum, e.g. correct counts) as it is.

    A tensor output with an example axis (``ndim >= 1``, e.g. per-example probabilities for an
    AUC) cannot be summed: it is concatenated along dim 0 instead, kept on the CPU.
    """
    for k, v in out.items():
        if torch.is_tensor(v) and v.dim() >= 1:
            part = v.detach().cpu()
            # The first part is copied: it may be a view that keeps a larger tensor alive.
            sums[k] = torch.cat([sums[k], part]) if k in sums else part.clone()
            continue
        w = size if k == "loss" else 1
        sums[k] = sums.get(k, 0.0) + float(v.detach() if torch.is_tensor(v) else v) * w


def merge(parts: list[tuple[dict[str, Any], int]]) -> tuple[dict[str, Any], int]:
    """Per-rank (sums, count) added in rank order: the same floats on every rank; tensors (see
    ``accumulate``) are concatenated in rank order."""
    sums: dict[str, Any] = {}
    for part, _ in parts:
        for k, v in part.items():
            if torch.is_tensor(v):
                sums[k] = torch.cat([sums[k], v]) if k in sums else v
            else:
                sums[k] = sums.get(k, 0.0) + v
    return sums, sum(n for _, n in parts)


class RankLedger:
    """This rank's training sums and step timings since the last sync; ``sync`` merges them.

    Syncs happen where every rank is at the same step (checkpoints, epoch ends), so no step
    pays a collective for bookkeeping. Rank 0 appends every rank's step rows to ``csv_path``
    (``ranks.csv``: one row per step and rank) and keeps the epoch's rows for its summary.
    """

    def __init__(self, ctx: DistContext, csv_path: Path, fresh: bool) -> None:
        self.ctx, self.csv_path = ctx, csv_path
        self.sums: dict[str, float] = {}
        self.n = 0
        self.rows: list[dict[str, Any]] = []
        self.epoch_rows: list[dict[str, Any]] = []
        if ctx.is_main and fresh:
            csv_path.unlink(missing_ok=True)  # a fresh run's rows only

    def add(self, out: dict[str, Any], size: int, row: dict[str, Any]) -> None:
        if row["examples"]:  # a weight-0 padding example counts for nothing
            self.n += size
            accumulate(self.sums, out, size)
        self.rows.append({"rank": self.ctx.rank, **row})

    def sync(self, progress: dict[str, Any]) -> None:
        """Adds every rank's sums into ``progress['epoch_sums']`` / ``['epoch_n']``."""
        parts = all_gather(self.ctx, (self.sums, self.n, self.rows))
        sums, n = merge([(p[0], p[1]) for p in parts])
        # merge: scalars add, per-example tensors concatenate (the same floats as adding)
        progress["epoch_sums"], _ = merge([(progress["epoch_sums"], 0), (sums, n)])
        progress["epoch_n"] += n
        self.sums, self.n, self.rows = {}, 0, []
        if self.ctx.is_main:
            rows = sorted((r for p in parts for r in p[2]), key=lambda r: (r["step"], r["rank"]))
            self.epoch_rows.extend(rows)
            if rows:
                new = not self.csv_path.exists()
                pd.DataFrame(rows).to_csv(self.csv_path, mode="a", header=new, index=False)

    def end_epoch(self) -> dict[str, float]:
        """Rank 0: logs each rank's mean step and returns the epoch's imbalance figures."""
        rows, self.epoch_rows = self.epoch_rows, []
        if not self.ctx.is_main or not rows:
            return {}
        for rank in range(self.ctx.world_size):
            mine = [r for r in rows if r["rank"] == rank]
            mean = {k: sum(r[k] for r in mine) / max(1, len(mine)) for k in rows[0]}
            log.info(
                "rank %d/%d: %.1f ms compute, %.1f ms waiting, %.1f ms per step; %.0f nodes",
                rank,
                self.ctx.world_size,
                1000 * (mean["forward_s"] + mean["backward_s"]),
                1000 * mean["wait_s"],
                1000 * mean["step_s"],
                mean["nodes"],
            )
        return imbalance_summary(rows)


def imbalance_summary(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Per-epoch figures from the per-rank step rows (``ranks.csv``).

    ``rank_imbalance``: mean over steps of max/mean local compute (forward + backward until the
    last gradient bucket) across ranks; 1.0 is perfect balance. ``node_imbalance``: the same
    for the nodes each rank received. ``sync_wait_share``: the share of all ranks' step time
    spent waiting in the gradient all-reduce.
    """
    steps: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        steps.setdefault(r["step"], []).append(r)
    time_ratio, node_ratio = [], []
    for group in steps.values():
        compute = [r["forward_s"] + r["backward_s"] for r in group]
        nodes = [r["nodes"] for r in group]
        if sum(compute) > 0:
            time_ratio.append(max(compute) / (sum(compute) / len(compute)))
        if sum(nodes) > 0:
            node_ratio.append(max(nodes) / (sum(nodes) / len(nodes)))
    total = sum(r["step_s"] for r in rows)
    return {
        "rank_imbalance": sum(time_ratio) / max(1, len(time_ratio)),
        "node_imbalance": sum(node_ratio) / max(1, len(node_ratio)),
        "sync_wait_share": sum(r["wait_s"] for r in rows) / total if total else 0.0,
    }
