"""The fused Tree-LSTM kernels, and the kernel generated from a user's own update, against the
same update in torch ops, forward + backward.

Usage: python benchmarks/fused_cells.py [--threads 2] [--rows 5476 1478 300 47] [--hidden 128]

For each row count, times ``binary_state`` (five gates from ``z``, two children's memories)
and ``leaf_state`` (three gates) through ``foldexp/kernels/treelstm.py``'s C++ kernels and
through ``binary_state_ops`` / ``leaf_state_ops``; and the same updates written as a user
writes them (``chunk``, ``torch.sigmoid``, ``*``, ``+``) through ``PointwiseFusion`` (the
engine's route for a user's cell: ``kernels/pointwise_graph.py``): forward, then
``autograd.grad`` of both outputs, cases alternating round by round; prints medians in µs and
the speed-ups over torch ops. 5,476 and 1,478 rows are groups of the peers bench's Tree-LSTM
step (hidden 128); 47 rows of 150 an SST batch's typical depth.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from foldexp.kernels import keep_freed_memory, treelstm
from foldexp.kernels.native import build_failure, load_kernels
from foldexp.kernels.pointwise_graph import PointwiseFusion


def users_binary(z: torch.Tensor, cl: torch.Tensor, cr: torch.Tensor) -> list[torch.Tensor]:
    i, fl, fr, o, u = z.chunk(5, dim=1)
    c = torch.sigmoid(i) * torch.tanh(u) + torch.sigmoid(fl) * cl + torch.sigmoid(fr) * cr
    return [torch.sigmoid(o) * torch.tanh(c), c]


def users_leaf(z: torch.Tensor) -> list[torch.Tensor]:
    i, o, u = z.chunk(3, dim=1)
    c = torch.sigmoid(i) * torch.tanh(u)
    return [torch.sigmoid(o) * torch.tanh(c), c]


def _generated(fn: Callable) -> Callable:
    fusion = PointwiseFusion([])
    return lambda *xs: fusion(fn, xs)


def _medians_us(cases: dict[str, Callable[[], object]], rounds: int, reps: int) -> dict:
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(rounds):
        for name, fn in cases.items():
            fn()
            t0 = time.perf_counter()
            for _ in range(reps):
                fn()
            times[name].append((time.perf_counter() - t0) / reps * 1e6)
    return {k: statistics.median(v) for k, v in times.items()}


def _step(state: Callable, inputs: list[torch.Tensor], grads: list[torch.Tensor]) -> Callable:
    def run() -> object:
        h, c = state(*inputs)
        return torch.autograd.grad((h, c), inputs, grads)

    return run


def _cases(rows: int, hidden: int) -> dict[str, Callable[[], object]]:
    g = torch.Generator().manual_seed(0)
    z5 = torch.randn(rows, 5 * hidden, generator=g).requires_grad_()
    z3 = torch.randn(rows, 3 * hidden, generator=g).requires_grad_()
    cl, cr = (torch.randn(rows, hidden, generator=g).requires_grad_() for _ in range(2))
    grads = [torch.randn(rows, hidden, generator=g) for _ in range(2)]
    return {
        "binary fused": _step(treelstm.binary_state, [z5, cl, cr], grads),
        "binary torch ops": _step(treelstm.binary_state_ops, [z5, cl, cr], grads),
        "leaf fused": _step(treelstm.leaf_state, [z3], grads),
        "leaf torch ops": _step(treelstm.leaf_state_ops, [z3], grads),
        "binary generated": _step(_generated(users_binary), [z5, cl, cr], grads),
        "leaf generated": _step(_generated(users_leaf), [z3], grads),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", type=int, nargs="+", default=[5476, 1478, 300, 47])
    ap.add_argument("--hidden", type=int, nargs="+", default=[128, 128, 150, 150])
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    if load_kernels() is None:
        raise SystemExit(f"the fused kernels cannot be built here: {build_failure()}")
    torch.set_num_threads(args.threads)
    keep_freed_memory()  # as training does: no page faults on each call's new tensors
    hidden = args.hidden + args.hidden[-1:] * (len(args.rows) - len(args.hidden))
    print(f"threads {args.threads}; forward + backward, medians of {args.rounds} rounds")
    print("| rows x hidden | cell | fused µs | generated µs | torch ops µs | speed-ups |")
    print("|---|---|---|---|---|---|")
    for rows, h in zip(args.rows, hidden):
        reps = max(3, 200_000 // (rows * h) * 10)
        med = _medians_us(_cases(rows, h), args.rounds, reps)
        for cell in ("binary", "leaf"):
            a, g, b = (med[f"{cell} {k}"] for k in ("fused", "generated", "torch ops"))
            print(f"| {rows} x {h} | {cell} | {a:,.0f} | {g:,.0f} | {b:,.0f} | "
                  f"{b / a:.2f}x / {b / g:.2f}x |")  # fmt: skip


if __name__ == "__main__":
    main()
