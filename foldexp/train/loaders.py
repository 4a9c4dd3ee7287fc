"""DataLoaders that live for the whole run, so worker processes keep their trace caches.

With ``trainer.num_workers > 0`` batches are traced and scheduled by ``model.collate`` in worker
processes while the main process trains. A model that caches per-input traces
(``Compiler(cache_traces=True)``) keeps that cache in each worker; a DataLoader rebuilt every
epoch would start fresh workers and trace everything again. Here each split gets one loader with
persistent workers, and each epoch only swaps in its new batch order: the batch sampler runs in
the main process, so the workers see nothing but the indices of the next batch.

A worker's batch crosses to the main process as bytes it pickled itself, every CPU tensor in it
as a numpy array (inline, rebuilt without a copy). Left to the DataLoader, each tensor would
travel through a shared-memory segment of its own: an SST batch (a plan of 25 small index
tensors) then took 16 ms to arrive against 1.4 ms to build in the main process, so workers
made training slower, not faster. Tensors that shared memory in the worker (views of one
another) arrive as separate tensors; an expanded tensor (a zero stride) goes by torch's own
pickling, which keeps it small.
"""

from __future__ import annotations

import copyreg
import io
import pickle
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Sampler

from foldexp.train.sampler import ShardedBatchSampler

__all__ = ["RunLoaders"]


class _CurrentSampler(Sampler[list[int]]):
    """A batch sampler whose batches (one epoch's ``ShardedBatchSampler``) can be swapped."""

    def __init__(self, sampler: ShardedBatchSampler) -> None:
        self.current = sampler

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self.current)

    def __len__(self) -> int:
        return len(self.current)


def _tensor_from_numpy(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(array)


def _reduce_tensor(t: torch.Tensor) -> Any:
    if (
        t.device.type == "cpu"
        and t.layout == torch.strided
        and not t.requires_grad
        and all(st != 0 or n <= 1 for st, n in zip(t.stride(), t.shape))  # not expanded
    ):
        try:
            return _tensor_from_numpy, (t.numpy(),)
        except (TypeError, RuntimeError):  # a dtype numpy lacks (bfloat16), a conjugate view
            pass
    return t.__reduce_ex__(4)


def batch_to_bytes(batch: Any) -> bytes:
    """``batch`` pickled with its CPU tensors as numpy arrays (``pickle.loads`` restores it)."""
    buf = io.BytesIO()
    # Protocol 4: under 5, a read-only numpy array in a batch would arrive read-only.
    pickler = pickle.Pickler(buf, protocol=4)
    pickler.dispatch_table = {**copyreg.dispatch_table, torch.Tensor: _reduce_tensor}
    pickler.dump(batch)
    return buf.getvalue()


class _CollateToBytes:
    """A worker's ``collate_fn``: the model's batch, as ``batch_to_bytes``."""

    def __init__(self, collate: Any) -> None:
        self.collate = collate

    def __call__(self, examples: list[Any]) -> bytes:
        return batch_to_bytes(self.collate(examples))


class _Unpickled:
    """Iterates a worker-fed loader, turning each batch's bytes back into the batch."""

    def __init__(self, loader: DataLoader) -> None:
        self.loader = loader

    def __iter__(self) -> Iterator[Any]:
        # The bytes come from this run's own worker processes, never from a file.
        return (pickle.loads(b) for b in self.loader)

    def __len__(self) -> int:
        return len(self.loader)


class RunLoaders:
    """One loader per split (``train``, ``dev``, ``test``) for the whole run.

    Args:
        model: its ``collate`` builds a batch (trace and schedule) from examples.
        workers: DataLoader worker processes; 0 collates in the main process.
        seed: seeds the loaders' private generator (the global RNG is left alone, so a resumed
            run draws the same dropout masks as an uninterrupted one).
    """

    def __init__(self, model: Any, workers: int, seed: int) -> None:
        self.model, self.workers, self.seed = model, workers, seed
        self._loaders: dict[str, tuple[DataLoader, _CurrentSampler]] = {}

    def get(self, split: str, examples: list[Any], sampler: ShardedBatchSampler) -> Iterable[Any]:
        """The loader of ``split``, now yielding the batches of ``sampler``."""
        entry = self._loaders.get(split)
        if entry is None or entry[0].dataset is not examples:
            current = _CurrentSampler(sampler)
            loader = DataLoader(
                examples,
                batch_sampler=current,
                collate_fn=_CollateToBytes(self.model.collate)
                if self.workers
                else self.model.collate,
                num_workers=self.workers,
                generator=torch.Generator().manual_seed(self.seed),
                persistent_workers=self.workers > 0,
            )
            self._loaders[split] = entry = (loader, current)
        entry[1].current = sampler
        return _Unpickled(entry[0]) if self.workers else entry[0]

    def worker_pids(self, split: str) -> list[int]:
        """Process ids of ``split``'s live workers (empty before its first epoch or with 0)."""
        entry = self._loaders.get(split)
        iterator = getattr(entry[0], "_iterator", None) if entry else None
        workers = getattr(iterator, "_workers", None) or []
        return [w.pid for w in workers]

    def close(self) -> None:
        """Stops every worker process."""
        for loader, _ in self._loaders.values():
            iterator = getattr(loader, "_iterator", None)
            shutdown = getattr(iterator, "_shutdown_workers", None)
            if shutdown is not None:
                shutdown()
        self._loaders.clear()
