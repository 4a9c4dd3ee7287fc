"""Tracing a batch whose model has an ``Unfold``: one stage of a plan built in stages.

An ``Unfold``'s length is computed, so a batch is traced with the lengths known so far
(``UnfoldLengths``, keyed by input and occurrence): a known occurrence traces as that many
``step`` invocations, an unknown one records a probe and traces as an empty sequence. An input
whose trace recorded a probe is incomplete: what follows its empty stand-ins may be wrong or
fail (``Nth`` of an empty sequence), so its errors wait for a later stage and its outputs are
zeros. ``foldexp/executor/loops.py`` runs the stages: probes first, then the batch with every
length known, checked against the ``stop`` values it computed.

Unlike ``trace_batch`` this walks with the Python closures (the C++ walk rolls an input back
and traces it again on errors of its own, which would count occurrences twice) and keeps no
trace cache: a length depends on the parameters, not only on the input.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from foldexp.blocks.internal import (
    Block,
    InputError,
    Op,
    UnfoldLengths,
    run_steps,
    structure_flattener,
    trace_fn,
)
from foldexp.compiler.trace import Trace
from foldexp.types import Type, VoidType, flatten_tensor_types

__all__ = ["trace_stage"]


def trace_stage(
    block: Block,
    ops: Sequence[Op],
    inputs: Sequence[Any],
    output_type: Type,
    known: dict[tuple[int, int], int],
    fuse: bool = False,
) -> tuple[Trace, np.ndarray, UnfoldLengths]:
    """Traces ``block`` over ``inputs`` with the ``Unfold`` lengths ``known``.

    Returns the trace, the output value ids (as ``trace_batch``) and what each input recorded
    (``probes``: occurrences still unknown; ``unrolled``: those traced with a length).

    Raises:
        InputError: of an input whose trace recorded no probe, naming its position.
    """
    tr = Trace(ops)
    ctx = tr.unfold_lengths = UnfoldLengths(known)  # type: ignore[attr-defined]
    void = isinstance(output_type, VoidType)
    flatten = None if void else structure_flattener(output_type)
    run = trace_fn(block, tr, fuse=fuse)
    outs: list[list[int]] = []
    for k, x in enumerate(inputs):
        tr.current_input = k
        start = tr.num_values
        ctx.begin_input(k)
        out: Any = None
        try:
            try:
                out = run(x)
            except RecursionError:
                tr.rollback(start)
                ctx.begin_input(k)
                out = run_steps(block, tr, x, fuse)
        except Exception as e:
            if not ctx.probes[k]:
                if isinstance(e, InputError):
                    e.path.insert(0, k)
                raise
            # After an empty stand-in: a later stage traces this input with its lengths.
        if void:
            continue
        if ctx.probes[k]:
            outs.append([tr.zeros(t) for t in flatten_tensor_types(output_type)])
        else:
            outs.append(flatten(out))  # type: ignore[misc]
    width = 0 if void else len(outs[0]) if outs else 0
    out_vids = np.asarray(outs, dtype=np.int64).reshape(len(inputs) if not void else 0, width)
    return tr, out_vids, ctx
