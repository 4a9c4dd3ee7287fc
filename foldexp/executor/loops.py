"""Running a batch whose model has an ``Unfold``: the plan built in stages.

A stage traces the batch with the ``Unfold`` lengths known so far (``compiler/loops.py``),
schedules it like any batch and runs it. A stage that recorded probes (occurrences whose length
is not known yet) runs without gradients: its only product is those lengths, every probe of the
stage computed in one batched loop call per depth. The next stage traces the batch again with
them; everything downstream of an ``Unfold`` is then an ordinary plan, still batched by depth.

The lengths are keyed by occurrence (input, and the how-manieth ``Unfold`` its trace reached),
which is only right while the occurrences before it had their right lengths: an ``Unfold``
nested in another one's output, say, is probed on an empty stand-in first. So the final stage
checks every length against the ``stop`` values it computed (stop false before the last step,
true at it unless ``max_length`` ran); a mismatch corrects the length (the first stop seen) or
forgets it (probed again), and the batch runs again. The first wrong occurrence of an input
has only right ones before it, so each round fixes at least one; a model without nested or
dependent ``Unfold`` s takes two stages.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

import torch

from foldexp.blocks.internal import (
    PROBE_METRIC,
    STOP_METRIC,
    InputError,
    Unfold,
    UnfoldLengths,
    While,
    loop_cap_fraction,
)
from foldexp.compiler.loops import trace_stage
from foldexp.compiler.schedule import InvalidInput, Plan, schedule
from foldexp.compiler.trace import locate_input_error
from foldexp.executor.run import execute

if TYPE_CHECKING:
    from foldexp.executor.compiled import Compiler

__all__ = ["StagedBatch", "run_staged", "INTERNAL_METRIC", "LoopCaps", "CAP_WARNING_FRACTION"]

# More than this fraction of a loop's instances stopped by ``max_iterations`` in an epoch: warn.
CAP_WARNING_FRACTION = 0.05

INTERNAL_METRIC = "\x00"  # the prefix of the metrics a stage records for itself


class StagedBatch:
    """What ``Compiler.build`` returns for a model with an ``Unfold``: the batch itself, whose
    plan is built stage by stage when it runs (its lengths need the parameters)."""

    def __init__(self, inputs: Sequence[Any]) -> None:
        self.inputs = list(inputs)
        self.trace_seconds = 0.0
        self.schedule_seconds = 0.0


def run_staged(
    compiler: Compiler, inputs: Sequence[Any]
) -> tuple[Plan, list[torch.Tensor], int, list[tuple[Unfold, int]]]:
    """Runs ``inputs`` through ``compiler``'s model stage by stage.

    Returns the final plan, its flat outputs then metrics (as ``execute``), how many stages
    ran, and each ``Unfold`` occurrence's block and length.

    Raises:
        RuntimeError: when the lengths do not settle (a bug: each round fixes one).
    """
    known: dict[tuple[int, int], int] = {}
    params = list(compiler.parameters()) if torch.is_grad_enabled() else []
    merge = [not op.is_random() for op in compiler.ops] if compiler.merge_duplicates else None
    limit = 256
    for stage in range(1, limit + 1):
        t0 = time.perf_counter()
        tr, out_vids, ctx = trace_stage(
            compiler.root, compiler.ops, inputs, compiler.output_type, known, compiler.fuse_ops
        )
        t1 = time.perf_counter()
        try:
            plan = schedule(
                tr, out_vids, compiler.schedule_order, merge, compiler.schedules_sinks_last()
            )
        except InvalidInput as e:  # found batch-wide; the blocks' own checks name the input
            raise locate_input_error(compiler.root, inputs) or InputError(None, str(e)) from None
        plan.trace_seconds = t1 - t0  # type: ignore[attr-defined]
        plan.schedule_seconds = time.perf_counter() - t1  # type: ignore[attr-defined]
        probing = any(ctx.probes.values())
        with torch.no_grad() if probing else nullcontext():
            flat = execute(plan, compiler.ops, params if not probing else [], compiler.device)
        metrics = _metrics(plan, flat)
        if probing:
            _learn_probes(ctx, metrics, known)
        settled = _check_lengths(ctx, metrics, known)
        if not probing and settled:
            lengths = [(b, n) for k in sorted(ctx.unrolled) for _, n, b in ctx.unrolled[k]]
            return plan, flat, stage, lengths
    raise RuntimeError(f"the Unfold lengths of this batch did not settle in {limit} stages")


def _metrics(plan: Plan, flat: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    n_out = len(plan.outputs)
    return {name: flat[n_out + j] for j, name in enumerate(plan.metrics)}


def _learn_probes(
    ctx: UnfoldLengths, metrics: dict[str, torch.Tensor], known: dict[tuple[int, int], int]
) -> None:
    """The probes' counts (one host read), in trace order, as the lengths of their keys."""
    counts = metrics[PROBE_METRIC].tolist()
    keys = [key for k in sorted(ctx.probes) for key in ctx.probes[k]]
    known.update(zip(keys, counts))


def _check_lengths(
    ctx: UnfoldLengths, metrics: dict[str, torch.Tensor], known: dict[tuple[int, int], int]
) -> bool:
    """Whether every length used agrees with the stop values computed; corrects ``known``."""
    stops = {name[len(STOP_METRIC) :]: v.tolist() for name, v in metrics.items()
             if name.startswith(STOP_METRIC)}  # fmt: skip
    pos = dict.fromkeys(stops, 0)
    settled = True
    for k in sorted(ctx.unrolled):
        for key, length, block in ctx.unrolled[k]:
            dtype = str(block.step.output_type.items[2].dtype)
            seen = stops[dtype][pos[dtype] : pos[dtype] + length]
            pos[dtype] += length
            first = next((i for i, s in enumerate(seen) if s > 0), None)
            if first == length - 1 or (first is None and length == block.max_length):
                continue
            settled = False
            if first is not None:
                known[key] = first + 1
            else:
                known.pop(key, None)
    return settled


class LoopCaps:
    """How many instances of each loop (``While``, ``Unfold``) ran and how many its limit
    stopped (``max_iterations``, ``max_length``), summed over the batches a compiler ran since
    the last ``report`` (the trainer's, once per epoch)."""

    def __init__(self, loops: Sequence[While | Unfold]) -> None:
        self.loops = list(loops)
        self.counts = [[0, 0] for _ in self.loops]

    def add(self, metrics: dict[str, tuple[torch.Tensor, torch.Tensor]]) -> None:
        """A batch's ``While`` counts, from its metrics."""
        for loop, acc in zip(self.loops, self.counts):
            if isinstance(loop, While):
                hit, n = loop_cap_fraction(metrics, loop)
                acc[0] += hit
                acc[1] += n

    def add_lengths(self, lengths: Sequence[tuple[Unfold, int]]) -> None:
        """A staged batch's ``Unfold`` occurrences and their lengths."""
        index = {id(loop): i for i, loop in enumerate(self.loops)}
        for block, n in lengths:
            acc = self.counts[index[id(block)]]
            acc[0] += n >= block.max_length
            acc[1] += 1

    def fractions(self, into: dict[str, float] | None = None) -> dict[str, float]:
        """Each loop's share of instances its limit stopped since the last ``report``, as the
        epoch's metrics ``capped_<name>`` (the loop's name, else ``While`` / ``Unfold``; ``#2``,
        ``#3``... after a name taken already in ``into``, which is updated and returned)."""
        out = {} if into is None else into
        for loop, (hit, n) in zip(self.loops, self.counts):
            base = "capped_" + re.sub(r"[^A-Za-z0-9_.-]", "_", loop.name or type(loop).__name__)
            key, k = base, 2
            while key in out:
                key, k = f"{base}#{k}", k + 1
            out[key] = hit / n if n else 0.0
        return out

    def report(self, fraction: float = CAP_WARNING_FRACTION) -> list[str]:
        """One line per loop whose instances hit the cap more often than ``fraction``; resets."""
        lines = []
        for loop, (hit, n) in zip(self.loops, self.counts):
            if n and hit > fraction * n:
                limit = (
                    f"max_iterations={loop.max_iterations}, not by their condition"
                    if isinstance(loop, While)
                    else f"max_length={loop.max_length}, not by their stop"
                )
                lines.append(
                    f"{loop!r}: {hit} of {n} instances ({100.0 * hit / n:.1f}%) stopped at {limit}"
                )
        self.counts = [[0, 0] for _ in self.loops]
        return lines
