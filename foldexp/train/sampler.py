"""Which examples each process trains on: global batches split into per-rank shards.

The data order is the single-process order: one permutation per epoch drawn from (seed, epoch),
cut into global batches of ``trainer.batch_size`` examples. Under data parallelism each global
batch is split across the ranks, so one optimizer step sees exactly the examples a single process
would see, whatever the number of processes; a run can resume on another number of processes,
and N processes reproduce one process's parameters up to float rounding.

Dynamic batching makes a rank's work grow with the nodes of its trees, not their count, so by
default (``balance="nodes"``) each global batch is split greedily by size — largest example first,
to the rank with the fewest nodes so far (LPT scheduling) — and every rank gets a similar number
of nodes. ``balance="examples"`` deals examples round-robin, as ``DistributedSampler`` does.

Every rank takes part in every step (DDP all-reduces gradients once per backward). A rank left
without examples — possible only in a short last batch of fewer examples than ranks — runs the
batch's first example with weight 0, which keeps the collectives matched without
``torch.distributed.algorithms.Join`` and the extra all-reduce it adds to every step.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from torch.utils.data import Sampler

__all__ = ["BALANCE_MODES", "Shard", "ShardedBatchSampler", "example_sizes", "partition"]

BALANCE_MODES = ("nodes", "examples")


def example_sizes(model: Any, examples: Sequence[Any]) -> list[int]:
    """The work of each example: ``model.example_size(x)``, else ``x.size()`` (trees), else 1."""
    size_fn = getattr(model, "example_size", None)
    if size_fn is not None:
        return [int(size_fn(x)) for x in examples]
    if examples and callable(getattr(examples[0], "size", None)):
        sizes = [x.size() for x in examples]
        if all(isinstance(s, int) for s in sizes):  # not a tensor's shape
            return sizes
    return [1] * len(examples)


def partition(sizes: Sequence[int], world: int, balance: str = "nodes") -> list[list[int]]:
    """Splits positions ``0..len(sizes)-1`` into ``world`` lists, each in ascending order.

    ``nodes``: greedy longest-first to the least-loaded rank (ties: the lower rank), which keeps
    every rank within one example's size of the others. ``examples``: position ``i`` goes to
    rank ``i % world``. Deterministic, so every rank computes every rank's part.
    """
    if balance not in BALANCE_MODES:
        raise ValueError(f"trainer.balance={balance!r}; expected one of {BALANCE_MODES}")
    if balance == "examples" or world == 1:
        return [list(range(r, len(sizes), world)) for r in range(world)]
    parts: list[list[int]] = [[] for _ in range(world)]
    heap = [(0, r) for r in range(world)]  # (nodes so far, rank)
    for pos in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        load, r = heapq.heappop(heap)
        parts[r].append(pos)
        heapq.heappush(heap, (load + max(1, sizes[pos]), r))
    return [sorted(p) for p in parts]


@dataclass(frozen=True)
class Shard:
    """One rank's part of one global batch."""

    indices: list[int]  # dataset indices this rank collates (a padding example when weight 0)
    examples: int  # real examples in this part (0: padding only, trained with weight 0)
    total: int  # examples in the whole global batch, over all ranks
    nodes: int  # summed example sizes of the real examples


class ShardedBatchSampler(Sampler[list[int]]):
    """A ``batch_sampler`` yielding rank ``rank``'s shard of each global batch of ``order``.

    Args:
        order: dataset indices in this epoch's order (the same list on every rank).
        batch_size: examples per global batch (per optimizer step, over all ranks).
        sizes: ``sizes[i]`` is the size of dataset example ``i``.
        rank, world: this process and the number of processes.
        balance: ``nodes`` or ``examples`` (see ``partition``).
        start: global batches already done this epoch (a resumed run skips them).
        limit: at most this many global batches from the start of the epoch (0 = all).
        pad: give an empty shard one weight-0 example (training, where every rank must join
            every step); else skip it (evaluation, which runs no collective per batch).
    """

    def __init__(
        self,
        order: Sequence[int],
        batch_size: int,
        sizes: Sequence[int],
        rank: int = 0,
        world: int = 1,
        balance: str = "nodes",
        start: int = 0,
        limit: int = 0,
        pad: bool = True,
    ) -> None:
        n_batches = -(-len(order) // batch_size)
        if limit:
            n_batches = min(n_batches, limit)
        self.shards: list[Shard] = []
        for k in range(start, n_batches):
            batch = list(order[k * batch_size : (k + 1) * batch_size])
            part = [batch[p] for p in partition([sizes[i] for i in batch], world, balance)[rank]]
            nodes = sum(sizes[i] for i in part)
            if part:
                self.shards.append(Shard(part, len(part), len(batch), nodes))
            elif pad:
                self.shards.append(Shard(batch[:1], 0, len(batch), 0))

    def __iter__(self) -> Iterator[list[int]]:
        return (s.indices for s in self.shards)

    def __len__(self) -> int:
        return len(self.shards)
