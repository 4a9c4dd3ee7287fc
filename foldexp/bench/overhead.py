"""What one training step asks of the device, counted on any machine: the ``step_overhead``
benchmark's instruments.

On CUDA every dispatched torch op is at least one kernel launch plus some microseconds of
Python and dispatch, and every read of a device value (``.item()``, ``.tolist()``, ``bool()``)
makes the CPU wait for the GPU. ``count_ops`` counts, under a ``TorchDispatchMode``, the aten
ops a step dispatches (forward and backward: the autograd engine runs a CPU step's backward on
the calling thread), the views among them (no kernel), the host syncs (the ops that make the
host wait for a CUDA device: a read of a value, ``nonzero``, a boolean-mask index, ...; see
``host_syncs``) and the host-to-device copies (a copy from a CPU tensor into a
tensor on another device: run the step with the model on ``meta`` to count them without a GPU).

``peers_step`` builds the peers' workload (``bench=peers``: random binary trees, the
Tree-LSTM of ``peer_torch``) as one step of the engine (traces cached), of the hand-written
level-by-level batching, or of the floor under both (``floor.py``), on the route a CUDA run
takes (foldexp's CPU-only kernels off).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from foldexp.bench.host_syncs import syncs_on_device

__all__ = [
    "KernelCount",
    "OpCount",
    "count_kernels",
    "count_ops",
    "cuda_route",
    "peers_step",
]

_COPIES = {"aten._to_copy.default", "aten.copy_.default"}


@dataclass
class OpCount:
    """The ops one call dispatched: those that are not views by name (views launch no kernel:
    counted apart), and how many were host syncs and uploads."""

    ops: Counter = field(default_factory=Counter)
    views: int = 0
    syncs: int = 0
    uploads: int = 0

    @property
    def not_views(self) -> int:
        return sum(self.ops.values())

    @property
    def total(self) -> int:
        return self.not_views + self.views

    def top(self, n: int = 8) -> str:
        """The ``n`` most frequent ops that are not views: ``mul 210, sigmoid 70, ...``."""
        return ", ".join(f"{name} {k}" for name, k in self.ops.most_common(n))


class _Counting(TorchDispatchMode):
    def __init__(self, count: OpCount) -> None:
        super().__init__()
        self.count = count

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        name = str(func)
        if func.is_view:
            self.count.views += 1
        else:
            self.count.ops[name.removeprefix("aten.").removesuffix(".default")] += 1
        if syncs_on_device(func, args, kwargs):
            self.count.syncs += 1
        elif name in _COPIES:
            sources = tree_flatten((args, kwargs))[0]
            to = out if name == "aten._to_copy.default" else args[0]
            if (
                isinstance(to, torch.Tensor)
                and to.device.type != "cpu"
                and any(isinstance(t, torch.Tensor) and t.device.type == "cpu" for t in sources)
            ):
                self.count.uploads += 1
        return out


# The counts in progress: the floor's C++ update calls add themselves to the innermost.
counting: list[OpCount] = []


def count_ops(fn: Callable[[], Any]) -> OpCount:
    """Runs ``fn()`` once and counts the aten ops it dispatched (see the module doc)."""
    count = OpCount()
    counting.append(count)
    try:
        with _Counting(count):
            fn()
    finally:
        counting.pop()
    return count


@dataclass
class KernelCount:
    """What one call launched on a CUDA device, read from torch's profiler: kernels, memory
    copies and sets (``Memcpy``/``Memset``), and the time the device was busy with them."""

    kernels: Counter = field(default_factory=Counter)
    copies: int = 0
    busy_us: float = 0.0

    @property
    def launches(self) -> int:
        return sum(self.kernels.values())

    def top(self, n: int = 6) -> str:
        """The ``n`` most launched kernels, names cut to 40 characters."""
        return ", ".join(f"{name[:40]} {k}" for name, k in self.kernels.most_common(n))


def count_kernels(fn: Callable[[], Any]) -> KernelCount:
    """Runs ``fn()`` once on a CUDA device under torch's profiler and counts what it launched."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    count = KernelCount()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    for event in prof.events():
        if event.device_type != DeviceType.CUDA:
            continue
        count.busy_us += event.time_range.elapsed_us()
        if event.name.startswith(("Memcpy", "Memset")):
            count.copies += 1
        else:
            count.kernels[event.name] += 1
    return count


@contextmanager
def cuda_route() -> Iterator[None]:
    """foldexp's CPU-only routes off (the fused C++ cells and oneDNN's linears) and weight
    gradients multiplied as on a GPU (``deferred.FLUSH_ROWS_GPU``), as on CUDA; restored
    after."""
    from foldexp.kernels import (
        deferred,
        fused_cells_enabled,
        onednn_enabled,
        set_fused_cells_enabled,
        set_onednn_enabled,
    )

    old = fused_cells_enabled(), onednn_enabled(), deferred.FLUSH_ROWS
    set_fused_cells_enabled(False)
    set_onednn_enabled(False)
    deferred.FLUSH_ROWS = deferred.FLUSH_ROWS_GPU
    try:
        yield
    finally:
        set_fused_cells_enabled(old[0])
        set_onednn_enabled(old[1])
        deferred.FLUSH_ROWS = old[2]


def peers_step(
    name: str,
    trees: int = 256,
    leaves: int = 64,
    hidden: int = 128,
    device: str = "cpu",
    seed: int = 0,
) -> Callable[[], Any]:
    """One training step (forward, loss, backward) of the peers' workload by ``engine``
    (traces cached; the loss left unread on the device), ``engine_plain`` (the same with a
    user's own plain cells, ``peer_torch.plain_params``), ``level`` (as ``bench=peers`` runs
    it, reading the loss) or ``floor`` (the fewest calls, backward by hand: ``floor.py``); the
    model on ``device``, as the step's ``module``."""
    from foldexp import Compiler
    from foldexp.bench import peer_torch
    from foldexp.bench.trees import make_trees
    from foldexp.blocks import Function, GetItem
    from foldexp.models.tree_lstm import binary_tree, word_leaf

    vocab, classes = 1000, 5
    batch = make_trees(trees, leaves, vocab, seed)
    torch.manual_seed(seed)
    m = peer_torch.TreeLSTMParams(vocab, hidden, hidden, classes).to(device)
    labels = torch.randint(classes, (trees,), generator=torch.Generator().manual_seed(seed))
    labels = labels.to(device)
    if name in ("engine", "engine_plain"):
        cells = m if name == "engine" else peer_torch.plain_params(m)
        tree = binary_tree(word_leaf(cells.embed, cells.leaf), cells.cell)
        # sinks_last: the plan a GPU run gets, wherever this step runs
        head = Function(cells.out)
        model = Compiler(tree >> GetItem(0) >> head, cache_traces=True, sinks_last=True)

        def engine() -> torch.Tensor:
            m.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model.run(model.build(batch)), labels)
            with torch.autograd.set_multithreading_enabled(False):  # as training runs it
                loss.backward()
            return loss

        engine.module = m  # type: ignore[attr-defined]
        return engine
    if name == "floor":
        from foldexp.bench.floor import floor_step

        fewest = floor_step(m, batch, labels)
        if fewest is None:
            raise ValueError(f"peers_step: no floor on {device}: no update kernel serves it")
        fewest.module = m  # type: ignore[attr-defined]
        return fewest
    if name == "level":
        step, _ = peer_torch.IMPLS["level"](m, batch, labels)

        def level() -> Any:
            m.zero_grad(set_to_none=True)
            with torch.autograd.set_multithreading_enabled(False):  # the engine's treatment
                return step()["loss"]

        level.module = m  # type: ignore[attr-defined]
        return level
    raise ValueError(f"peers_step: {name!r}; expected engine, engine_plain, level or floor")
