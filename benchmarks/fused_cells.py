"""The fused Tree-LSTM kernels against the same update in torch ops, forward + backward.

Usage: python benchmarks/fused_cells.py [--threads 2] [--rows 5476 1478 300 47] [--hidden 128]

For each row count, times ``binary_state`` (five gates from ``z``, two children's memories)
and ``leaf_state`` (three gates) through ``foldexp/kernels/treelstm.py``'s C++ kernels and
through ``binary_state_ops`` / ``leaf_state_ops``: forward, then ``autograd.grad`` of both
outputs, cases alternating round by round; prints medians in µs and the speed-up. 5,476 and
1,478 rows are groups of the peers bench's Tree-LSTM step (hidden 128); 47 rows of 150 an SST
batch's typical depth.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from foldexp.kernels import keep_freed_memory, treelstm
from foldexp.kernels.native import build_failure, load_kernels


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
    print("| rows x hidden | cell | fused µs | torch ops µs | speed-up |\n|---|---|---|---|---|")
    for rows, h in zip(args.rows, hidden):
        reps = max(3, 200_000 // (rows * h) * 10)
        med = _medians_us(_cases(rows, h), args.rounds, reps)
        for cell in ("binary", "leaf"):
            a, b = med[f"{cell} fused"], med[f"{cell} torch ops"]
            print(f"| {rows} x {h} | {cell} | {a:,.0f} | {b:,.0f} | {b / a:.2f}x |")


if __name__ == "__main__":
    main()
