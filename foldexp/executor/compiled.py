"""``Compiler``: a block graph as a ``torch.nn.Module`` that runs whole batches of inputs.

``Compiler(block)`` types the block graph (failing early, naming the block), collects its
operations and their parameters, and then for every call: trace → schedule → execute. The two
halves are exposed separately so the CPU-side work (``build``, producing a picklable ``Plan``) can
run in DataLoader workers while the math (``run``) runs in the main process.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from foldexp.blocks.internal import (
    Block,
    FusedOps,
    InputError,
    Op,
    Pipe,
    contains_unfold,
    convert_to_block,
    fused_blocks,
    iter_blocks,
    loop_blocks,
    structure_builder,
)
from foldexp.compiler.cache import PlanCache, TraceCache
from foldexp.compiler.schedule import ORDERS, InvalidInput, Plan, schedule
from foldexp.compiler.trace import locate_input_error, trace_batch
from foldexp.executor.loops import INTERNAL_METRIC, LoopCaps, StagedBatch, run_staged
from foldexp.executor.run import execute
from foldexp.types import PyObjectType, Type, VoidType, is_tensor_tree

__all__ = ["Compiler", "collect_ops"]


def collect_ops(root: Block, fuse: bool = False) -> list[Op]:
    """Every operation reachable from ``root``, in a stable (depth-first) order; with ``fuse``
    also the fused ops of every pipe's runs of op blocks (``blocks/_fusion.py``)."""
    ops: list[Op] = []
    seen_ops: set[int] = set()

    def fused(b: Block) -> list[Block]:
        # The unfused blocks stay too: a block traced through ``_trace`` (inside a ``Map``,
        # say) invokes them one by one.
        return (
            [f for f in fused_blocks(b) if isinstance(f, FusedOps)] if isinstance(b, Pipe) else []
        )

    for b in iter_blocks(root, fused if fuse else None):
        op = getattr(b, "op", None)
        if isinstance(op, Op) and id(op) not in seen_ops:
            seen_ops.add(id(op))
            ops.append(op)
    return ops


class Compiler(nn.Module):
    """Compiles ``block`` for batched execution.

    Calling the compiler on a list of Python inputs returns the batched output: a tensor (or a
    tuple of tensors, following the block's output type) whose row ``i`` belongs to input ``i``.

    Args:
        block: the root block (anything ``convert_to_block`` accepts).
        input_type: the root's input type; Python objects by default.
        cache_traces: keep each input's trace and reuse it when the same (unmutated) input
            object comes back in a later batch — an epoch then costs only scheduling; and keep
            the plan of a batch built twice (the same inputs in the same order: an evaluation
            split, a repeated request), which then costs neither. See
            ``foldexp/compiler/cache.py``. (Any plan run again without gradients, kept here or
            by the caller, reuses its buffers, unless a forward hook is registered on a
            module of the model: ``foldexp/executor/replay.py``.)
        cache_plans: keep the plans of batches built twice, as above; ``None`` (the default):
            when ``cache_traces`` is on. ``False`` with ``cache_traces``: every batch is
            scheduled, as an epoch of shuffled batches is.
        fuse_ops: trace each run of two or more op blocks in a ``Pipe`` (``Function >>
            Function``) as one operation: fewer invocations, calls and buffer writes, the same
            results; depths and call counts then count a run once (``blocks/_fusion.py``).
        schedule_order: ``depth`` (the Fold paper: one call per op and depth) or ``agenda``
            (DyNet's autobatching order: run every ready invocation of the op with the lowest
            average depth; ``foldexp/compiler/agenda.py``).
        merge_duplicates: compute equal invocations once (same op, equal arguments; a word's
            leaf cell once per batch, not once per occurrence), except for ops that are random
            when the plan is built (dropout in training mode, ``Function(..., random=True)``);
            ``foldexp/compiler/merge.py``. Same results; fewer rows.
        device: where a model without parameters runs (its buffers are made there); it follows
            ``compiler.to(...)`` as parameters do. A model with parameters runs where they are.
        sinks_last: in depth order, run every invocation whose outputs no other one reads (a
            classifier over the roots of trees of different heights) at the batch's deepest
            depth, one call instead of one per height (``foldexp/compiler/sinks.py``). ``None``
            (the default): where the model runs on a GPU, whose step is the host's launches;
            on the CPU the paper's depths, which the published results were measured with (the
            regrouped rows round differently, for no speed measured there).

    Attributes:
        last_stats: counters of the latest call — ``calls`` (operation launches), ``nodes``,
            ``max_depth``, and seconds spent in ``trace``, ``schedule`` and ``execute``.
        last_metrics: metrics recorded by ``Metric`` blocks in the latest call: name →
            ``(values, input_index)``.
    """

    def __init__(
        self,
        block: Any,
        input_type: Type | None = None,
        cache_traces: bool = False,
        fuse_ops: bool = True,
        schedule_order: str = "depth",
        merge_duplicates: bool = True,
        cache_plans: bool | None = None,
        device: torch.device | str | None = None,
        sinks_last: bool | None = None,
    ) -> None:
        super().__init__()
        # An empty, unsaved buffer: ``.to(device)`` moves it, so a model without parameters
        # keeps the device it was given or moved to.
        self.register_buffer("_device_anchor", torch.empty(0, device=device), persistent=False)
        root = convert_to_block(block)
        out = root.infer(input_type or root._declared_input or PyObjectType())
        if not (isinstance(out, VoidType) or is_tensor_tree(out)):
            raise TypeError(
                f"the root block {root!r} outputs {out!r}; a compiled block must output a tensor "
                "or a (nested) tuple of tensors (wrap sequences in Reduce, Fold, Sum, ...)"
            )
        self.root = root
        self.output_type = out
        if schedule_order not in ORDERS:
            raise ValueError(f"schedule_order={schedule_order!r}; expected one of {ORDERS}")
        self.fuse_ops, self.schedule_order = fuse_ops, schedule_order
        if sinks_last not in (None, True, False):
            raise ValueError(f"sinks_last={sinks_last!r}; expected True, False or None (auto)")
        self.sinks_last = sinks_last
        self.merge_duplicates = merge_duplicates
        self.ops = collect_ops(root, fuse=fuse_ops)
        modules: list[nn.Module] = []
        for op in self.ops:
            if op.module is not None and all(op.module is not m for m in modules):
                modules.append(op.module)
        self.layers = nn.ModuleList(modules)
        self._build_output = None if isinstance(out, VoidType) else structure_builder(out)
        self.trace_cache = TraceCache(fuse=fuse_ops) if cache_traces else None
        keep_plans = cache_traces if cache_plans is None else cache_plans
        self.plan_cache = PlanCache() if keep_plans else None
        self.last_stats: dict[str, float] = {}
        self.last_metrics: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        # An ``Unfold``'s length is computed: such a model's plans are built in stages as they
        # run (``executor/loops.py``), never cached.
        self.staged = contains_unfold(root)
        loops = loop_blocks(root)
        # Per loop: instances run and stopped by their limit (the trainer warns once an epoch).
        self.loop_caps = LoopCaps(loops) if loops else None

    @property
    def device(self) -> torch.device:
        """Where the parameters are (the first found); for a model without any, the ``device``
        it was given or moved to (the default device otherwise)."""
        # ``parameters()`` walks every module (4 µs, which a served tree feels at every call);
        # its first is the first layer's own first parameter where that layer has one.
        if len(self.layers):
            for p in self.layers[0]._parameters.values():
                if p is not None:
                    return p.device
        p = next(self.parameters(), None)
        return p.device if p is not None else self._device_anchor.device

    def schedules_sinks_last(self) -> bool:
        """Whether plans built now run sinks last (``sinks_last``; by default on a GPU)."""
        if self.sinks_last is not None:
            return self.sinks_last
        return self.device.type != "cpu"

    def build(self, inputs: Sequence[Any]) -> Plan:
        """Traces and schedules a batch (CPU only, no parameters touched): a picklable plan.

        For a model with an ``Unfold`` (``staged``) the plan needs computed lengths: this
        returns a ``StagedBatch`` (the inputs), whose plan ``run`` builds in stages
        (``executor/loops.py``).

        Raises:
            InputError: for a batch that is not a list (or other sized sequence) of inputs, and
                for a bad input, naming its position in the batch and the path inside it.
            ValueError: for an empty batch.
        """
        _check_batch(inputs)
        if len(inputs) == 0:
            raise ValueError("cannot compile an empty batch")
        if self.staged:
            return StagedBatch(inputs)  # type: ignore[return-value]
        t0 = time.perf_counter()
        random = tuple(op.is_random() for op in self.ops)
        merge = tuple(not r for r in random) if self.merge_duplicates else ()
        sinks = self.schedules_sinks_last()
        # The plan depends on which ops are random even without merging: sinks last keeps a
        # random op's depths (``sinks.py``), so dropout on or off is part of the key either way.
        flags = (self.merge_duplicates, sinks, *random)
        if self.plan_cache is not None:
            plan = self.plan_cache.get(inputs, flags)
            if plan is not None:
                plan.trace_seconds, plan.schedule_seconds = 0.0, time.perf_counter() - t0  # type: ignore[attr-defined]
                return plan
        if self.trace_cache is not None:
            trace, out_vids = self.trace_cache.trace_batch(
                self.root, self.ops, inputs, self.output_type
            )
        else:
            trace, out_vids = trace_batch(
                self.root, self.ops, inputs, self.output_type, fuse=self.fuse_ops
            )
        t1 = time.perf_counter()
        try:
            plan = schedule(trace, out_vids, self.schedule_order, list(merge) or None, sinks)
        except InvalidInput as e:
            # Found batch-wide; the blocks' own checks say which input and where.
            raise locate_input_error(self.root, inputs) or InputError(None, str(e)) from None
        plan.trace_seconds = t1 - t0  # type: ignore[attr-defined]
        plan.schedule_seconds = time.perf_counter() - t1  # type: ignore[attr-defined]
        if self.plan_cache is not None:
            self.plan_cache.put(inputs, flags, plan)
        return plan

    def run(self, plan: Plan) -> Any:
        """Executes a plan built by ``build``; returns the batched output."""
        t0 = time.perf_counter()
        stages, lengths = 1, []
        if isinstance(plan, StagedBatch):
            plan, flat, stages, lengths = run_staged(self, plan.inputs)
        else:
            params = list(self.parameters()) if torch.is_grad_enabled() else []  # none to train
            flat = execute(plan, self.ops, params, self.device)
        n_out = len(plan.outputs)
        # Plain attributes, set past ``nn.Module.__setattr__``'s checks for parameters and
        # submodules (a few µs a call, which a served single tree feels).
        self.__dict__["last_metrics"] = {
            name: (flat[n_out + j], inputs)
            for j, (name, (_, _, inputs)) in enumerate(plan.metrics.items())
            if not name.startswith(INTERNAL_METRIC)
        }
        if self.loop_caps is not None:
            self.loop_caps.add(self.last_metrics)
            self.loop_caps.add_lengths(lengths)
        self.__dict__["last_stats"] = {
            "calls": plan.num_calls,
            "nodes": plan.num_nodes,
            "merged": plan.num_merged,
            "max_depth": plan.max_depth,
            "trace": getattr(plan, "trace_seconds", 0.0),
            "schedule": getattr(plan, "schedule_seconds", 0.0),
            "execute": time.perf_counter() - t0,
            **({"stages": stages} if self.staged else {}),
        }
        return None if self._build_output is None else self._build_output(flat[:n_out])

    def forward(self, inputs: Sequence[Any]) -> Any:
        """Builds and runs a batch: ``compiler(list_of_inputs)``."""
        return self.run(self.build(inputs))

    def extra_repr(self) -> str:
        return f"block={self.root!r}, ops={len(self.ops)}"


def _check_batch(inputs: Any) -> None:
    """A batch is a sized, ordered collection of inputs (a list, a tuple); ``InputError``
    otherwise, before anything is traced."""
    if inputs is None or not hasattr(inputs, "__len__") or not hasattr(inputs, "__iter__"):
        hint = "; make it one with list(...)" if hasattr(inputs, "__iter__") else ""
        raise InputError(
            None,
            f"expected a batch: a list of inputs, got {type(inputs).__name__} {inputs!r}{hint}",
        )
