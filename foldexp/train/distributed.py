"""Data-parallel training on ``torch.distributed``: DDP, collectives and per-step bookkeeping.

Once the ranks run (``launch.py`` gets them: ``spawn``, torchrun, submitit), every rank runs
the same training loop; ``StepBook`` is the loop's one door to DDP. On a single process it adds
each batch's outputs to the epoch's sums and does nothing else. Under DDP it wraps the model,
weights each rank's loss by its share of the global batch (so DDP's averaged gradient is the
single-process gradient), times each step (``BucketClock``) and keeps the rank's sums and step
rows in a ``RankLedger`` that is merged where every rank is at the same step (checkpoints,
epoch ends). Rank 0 alone logs and writes files; the collectives here are per epoch or per
checkpoint, never per step (the only per-step communication is DDP's gradient all-reduce).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch
import torch.distributed as dist

from foldexp.data.cells import spreadsheet_frame

__all__ = [
    "STRATEGIES",
    "RankLedger",
    "accumulate",
    "merge",
    "BucketClock",
    "DistContext",
    "all_gather",
    "broadcast",
    "StepBook",
    "check_global_batch",
    "imbalance_summary",
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


def read_scalars(outs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Batches' outputs with their scalar tensors read as floats, for ``accumulate``: one wait
    for each device holding some, not one per value (a GPU run reads a batch's statistics
    with the next few's). float64 holds each float32 or count exactly, as ``float(v)`` would
    read it, so the sums are the same."""
    read = [dict(out) for out in outs]
    slots = [
        (i, k)
        for i, out in enumerate(outs)
        for k, v in out.items()
        if torch.is_tensor(v) and v.dim() == 0
    ]
    by_device: dict[torch.device, list[tuple[int, str]]] = {}
    for i, k in slots:
        by_device.setdefault(outs[i][k].device, []).append((i, k))
    for where in by_device.values():  # a model may keep a statistic on the CPU
        values = torch.stack([outs[i][k].detach().double() for i, k in where]).tolist()
        for (i, k), value in zip(where, values):
            read[i][k] = value
    return read


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
                spreadsheet_frame(pd.DataFrame(rows)).to_csv(
                    self.csv_path, mode="a", header=new, index=False
                )

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


# --- the training loop's door to DDP ------------------------------------------------------


def check_global_batch(ctx: DistContext, batch_size: int) -> None:
    """``trainer.batch_size`` is the global batch: it must give every rank an example."""
    if ctx.enabled and batch_size < ctx.world_size:
        raise ValueError(
            f"trainer.batch_size={batch_size} is the global batch; it must hold at least one "
            f"example per process ({ctx.world_size})"
        )


class StepBook:
    """What the training loop does differently under DDP, behind one interface.

    ``net`` is what the loop calls (the DDP wrapper, or the model itself); ``backward`` weights
    this rank's loss by its share of the global batch; ``record`` adds a step's outputs to the
    epoch's sums (``progress['epoch_sums']``, ``['epoch_n']``) at once on a single process, or
    to the rank's ledger with the step's timings; ``sync`` merges the ledgers (every rank must
    call it at the same step); ``end_epoch`` adds rank 0's imbalance figures to the epoch's row
    and gives every rank that row, so all take the same early-stopping decisions.
    """

    def __init__(
        self, ctx: DistContext, model: torch.nn.Module, find_unused: bool, csv: Path, fresh: bool
    ) -> None:
        self.ctx = ctx
        self.net: torch.nn.Module = model
        self.clock: BucketClock | None = None
        self.ledger: RankLedger | None = None
        if ctx.enabled:
            self.net = wrap(model, find_unused)
            self.clock = BucketClock(self.net)
            self.ledger = RankLedger(ctx, csv, fresh=fresh)

    def backward(self, loss: torch.Tensor, shard: Any) -> None:
        if self.ctx.enabled:
            # DDP averages over ranks: weighting by this rank's share of the examples makes
            # the average the gradient of the loss over the whole global batch.
            loss = loss * (self.ctx.world_size * shard.examples / shard.total)
        # On this thread: autograd otherwise hands a GPU's backward to its device thread, and
        # the engine's backward, many small calls, pays for the hand-offs (an H200, SST epoch
        # 5.40, 5.96 → 4.86, 4.93 s, alternating). A CPU's backward runs here anyway; the
        # setting is this thread's only.
        with torch.autograd.set_multithreading_enabled(False):
            loss.backward()

    def record(
        self,
        progress: dict[str, Any],
        out: dict[str, Any],
        size: int,
        shard: Any,
        times: tuple[float, float, float, float, float],
    ) -> None:
        """``times``: when the batch was ready to be asked for, forward began, forward ended,
        backward (with the all-reduce) ended, and the optimizer step ended."""
        if self.ledger is None:
            progress["epoch_n"] += size
            accumulate(progress["epoch_sums"], out, size)
            return
        t_ready, t0, t1, t2, t3 = times
        ready = self.clock.ready if self.clock and self.clock.ready > t1 else t2
        row = {
            "epoch": progress["epoch"],
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
        self.ledger.add(out, size, row)

    def sync(self, progress: dict[str, Any]) -> None:
        if self.ledger is not None:
            self.ledger.sync(progress)

    def end_epoch(self, row: dict[str, Any]) -> dict[str, Any]:
        if self.ledger is None:
            return row
        row.update(self.ledger.end_epoch())
        return broadcast(self.ctx, row)
