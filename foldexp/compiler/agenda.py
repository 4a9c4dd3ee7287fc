"""DyNet's agenda-based batching order, as an alternative to batching by depth.

Depth batching (the Fold paper's §2) groups the invocations of one op at one depth. DyNet's
autobatching (Neubig, Goldberg and Dyer 2017) instead keeps an *agenda* of ready invocations —
those whose arguments are all computed — and repeatedly runs every ready invocation of one op,
choosing the op whose ready invocations have the lowest average depth. The agenda waits where an
op's invocations sit at many depths, e.g. a classifier over roots of trees of different heights
(one call instead of one per height); the depth order with ``sinks_last`` (a GPU run's) does
the same for such sinks (``sinks.py``) and keeps the rest batched by depth.

``agenda_levels(trace)`` gives every invocation the step at which the agenda runs it; the
scheduler then groups by (step, op) exactly as it groups by (depth, op), so everything after
(buffers, gathers, execution) is shared. Vectorised with numpy: each step is a few passes over
the invocation and edge arrays, and there are as many steps as calls.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from foldexp.compiler.native_trace import int64_array

if TYPE_CHECKING:
    from foldexp.compiler.cache import BatchTrace
    from foldexp.compiler.trace import Trace

__all__ = ["agenda_levels"]


def agenda_levels(trace: Trace | BatchTrace) -> list[np.ndarray]:
    """Per op, the agenda step of each of its invocations (in the trace's order)."""
    counts = [len(trace.op_depth[i]) for i in range(len(trace.ops))]
    starts = np.cumsum([0, *counts])
    n = int(starts[-1])
    inv_op = np.repeat(np.arange(len(counts)), counts)
    depth = np.concatenate(
        [int64_array(trace.op_depth[i]) for i in range(len(counts))] or [[]]
    ).astype(np.float64)
    producer = np.full(trace.num_values, -1, dtype=np.int64)  # value id → invocation
    consumers, producers = [], []
    for i, op in enumerate(trace.ops):
        if not counts[i]:
            continue
        inv = np.arange(starts[i], starts[i + 1])
        first = int64_array(trace.op_first[i])
        for k in range(op.n_out):
            producer[first + k] = inv
    for i, op in enumerate(trace.ops):
        if not counts[i]:
            continue
        args = int64_array(trace.op_args[i]).reshape(counts[i], len(op.in_types))
        consumers.append(np.repeat(np.arange(starts[i], starts[i + 1]), args.shape[1]))
        producers.append(producer[args.reshape(-1)])
    consumer = np.concatenate(consumers) if consumers else np.zeros(0, np.int64)
    source = np.concatenate(producers) if producers else np.zeros(0, np.int64)
    keep = source >= 0  # constants are ready from the start
    consumer, source = consumer[keep], source[keep]

    # Consumers of each invocation as CSR, so a step touches only the edges it completes.
    order = np.argsort(source, kind="stable")
    out_consumer = consumer[order]
    out_start = np.searchsorted(source[order], np.arange(n + 1))
    pending = np.bincount(consumer, minlength=n)  # arguments not computed yet (with repeats)
    level = np.full(n, -1, dtype=np.int64)
    pool = np.flatnonzero(pending == 0)  # the agenda: ready, not yet run
    n_ops = len(counts)
    step = 0
    while len(pool):
        ops_ready = inv_op[pool]
        total = np.bincount(ops_ready, weights=depth[pool], minlength=n_ops)
        count = np.bincount(ops_ready, minlength=n_ops)
        mean = np.where(count > 0, total / np.maximum(count, 1), np.inf)
        chosen = ops_ready == int(np.argmin(mean))  # lowest average depth; ties: earlier op
        run, pool = pool[chosen], pool[~chosen]
        level[run] = step
        step += 1
        # Edges out of the invocations just run: their consumers wait for one argument less.
        lo, width = out_start[run], out_start[run + 1] - out_start[run]
        if not width.any():
            continue
        offset = np.arange(width.sum()) - np.repeat(np.cumsum(width) - width, width)
        touched = out_consumer[np.repeat(lo, width) + offset]
        np.subtract.at(pending, touched, 1)
        fresh = np.unique(touched)
        pool = np.concatenate([pool, fresh[pending[fresh] == 0]])
    if (level < 0).any():
        raise RuntimeError("agenda scheduling found a cycle in the trace")
    return [level[starts[i] : starts[i + 1]] for i in range(len(counts))]
