"""Which depth each invocation runs at in depth batching: its own, except that a *sink* runs
at the deepest depth of the batch.

A sink is an invocation whose outputs no other invocation reads: they go to the batch's outputs
or metrics. A classifier over the roots of trees of different heights sits at as many depths as
there are heights, one call each (the peers' step: 9 classifier calls beside 18 cell calls);
waiting costs nothing, since nothing waits for a sink, and every sink of an op then shares one
call. No other invocation moves. Random ops (a dropout in training mode) keep their depths, so
their draws follow the paper's order. DyNet's agenda order (``agenda.py``) waits the same way,
but for every op. ``Compiler(sinks_last=...)`` chooses; by default a model on a GPU, where a
call's cost is its launches and their host time, and not the CPU, where the regrouped rows would
round differently for no speed measured there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from foldexp.compiler.native_trace import int64_array

if TYPE_CHECKING:
    from foldexp.compiler.cache import BatchTrace
    from foldexp.compiler.trace import Trace

__all__ = ["depths_with_sinks_last"]


def depths_with_sinks_last(
    trace: Trace | BatchTrace, firsts: list[np.ndarray], all_args: list[np.ndarray]
) -> list[np.ndarray]:
    """Per op, the depth each invocation runs at (see the module doc); ``firsts`` and
    ``all_args``: each op's first output ids and flat arguments, as ``schedule`` converted them."""
    arrays = [int64_array(d) for d in trace.op_depth]
    sizes = [len(d) for d in arrays]
    if not any(sizes):
        return arrays
    deepest = max(int(d.max()) for d in arrays if len(d))
    read = np.zeros(trace.num_values, dtype=bool)
    for i, op in enumerate(trace.ops):
        if sizes[i] and op.in_types:
            read[all_args[i]] = True
    depths = []
    for i, op in enumerate(trace.ops):
        depth = arrays[i]
        if sizes[i] and not op.is_random():
            first = firsts[i]
            sink = np.ones(sizes[i], dtype=bool)
            for k in range(op.n_out):
                sink &= ~read[first + k]
            if sink.any():
                depth = np.where(sink, deepest, depth)
        depths.append(depth)
    return depths
