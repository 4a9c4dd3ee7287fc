"""oneDNN against torch's default (MKL) for the three matmuls of a linear layer's training step.

Usage: python benchmarks/onednn_linear.py [--threads 2] [--rows 16384 4096 1024 256 25 8 1]
       python benchmarks/onednn_linear.py --vary 48 1200 [--threads 1 --calls 3000]

For a Tree-LSTM gate layer (input 256, output 640: hidden 128) at each row count, times the
forward (``x Wᵀ + b``), the input gradient (``dy W``) and the weight gradient (``dyᵀ x``) both
ways, alternating A and B round by round, and prints medians as GFLOP/s (µs for tiny calls)
with the oneDNN/MKL speed ratio. Then the same for a whole ``foldexp.kernels.linear`` forward +
backward against ``F.linear``, which is what ``Linear`` layers in the models run. This is the
measurement behind ``foldexp/kernels/dense.py`` and its ``MIN_ROWS``.

``--vary LO HI`` instead runs forward + backward on a new random row count in [LO, HI) at every
call, as dynamic batches do (the same sequence of counts both ways), and reports GFLOP/s and the
process's resident memory after each way: what oneDNN's per-shape kernel caches cost.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from foldexp.kernels import dense


def _median_s(fns: dict[str, Callable[[], object]], rounds: int, reps: int) -> dict[str, float]:
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            fn()
            t0 = time.perf_counter()
            for _ in range(reps):
                fn()
            times[name].append((time.perf_counter() - t0) / reps)
    return {k: statistics.median(v) for k, v in times.items()}


def _row(label: str, flops: float, med: dict[str, float]) -> str:
    a, b = med["mkl"], med["onednn"]
    if flops >= 1e8:
        cells = f"{flops / a / 1e9:7.0f} GFLOP/s  {flops / b / 1e9:7.0f} GFLOP/s"
    else:
        cells = f"{a * 1e6:9.1f} µs     {b * 1e6:9.1f} µs    "
    return f"{label:<28} {cells}  {a / b:5.2f}x"


def _cases(
    mm: Callable, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, dy: torch.Tensor
) -> dict:
    """The three products of a linear layer's step, MKL (torch's default) and oneDNN."""
    return {
        "forward": {"mkl": lambda: torch.addmm(b, x, w.t()), "onednn": lambda: mm(x, w, b)},
        "input gradient": {"mkl": lambda: dy @ w, "onednn": lambda: mm(dy, w.t(), None)},
        "weight gradient": {
            "mkl": lambda: dy.t() @ x,
            "onednn": lambda: mm(x.t(), dy.t(), None).t(),
        },
    }


def _layer_steps(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, dy: torch.Tensor) -> dict:
    """A whole forward + backward: ``F.linear`` against ``foldexp.kernels.linear``."""
    xg, wg, bg = (t.clone().requires_grad_() for t in (x, w, b))
    return {
        "mkl": lambda: F.linear(xg, wg, bg).backward(dy),
        "onednn": lambda: dense.linear(xg, wg, bg).backward(dy),
    }


def _rss_mb() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 2**20


def _vary(lo: int, hi: int, calls: int, k: int, m: int) -> None:
    """Forward + backward at a new row count every call, MKL first, then oneDNN."""
    counts = random.Random(0).choices(range(lo, hi), k=calls)
    x_all, dy_all = torch.randn(hi, k), torch.randn(hi, m)
    w, b = torch.randn(m, k, requires_grad=True), torch.randn(m, requires_grad=True)
    flops = 3 * 2.0 * k * m * sum(counts)
    for name, fn in (("MKL (default)", F.linear), ("oneDNN", dense.linear)):
        t0 = time.perf_counter()
        for n in counts:
            x = x_all[:n].clone().requires_grad_()
            fn(x, w, b).backward(dy_all[:n])
        seconds = time.perf_counter() - t0
        print(f"{name:<14} {flops / seconds / 1e9:6.0f} GFLOP/s   RSS {_rss_mb()} MB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", type=int, nargs="+", default=[16384, 4096, 1024, 256, 25, 8, 1])
    ap.add_argument("--in-features", type=int, default=256)
    ap.add_argument("--out-features", type=int, default=640)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--vary", type=int, nargs=2, metavar=("LO", "HI"))
    ap.add_argument("--calls", type=int, default=3000, help="with --vary")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if not dense.onednn_enabled():
        raise SystemExit("this torch has no oneDNN (torch.backends.mkldnn): nothing to compare")
    k, m = args.in_features, args.out_features
    mm = dense._mm
    print(f"torch {torch.__version__}, {args.threads} threads, layer {k} -> {m}")
    if args.vary:
        print(f"row counts drawn from [{args.vary[0]}, {args.vary[1]}), {args.calls} calls")
        _vary(*args.vary, args.calls, k, m)
        return
    print(f"{'case':<28} {'MKL (default)':>16} {'oneDNN':>16}  ratio")
    for n in args.rows:
        torch.manual_seed(0)
        x, w, b, dy = torch.randn(n, k), torch.randn(m, k), torch.randn(m), torch.randn(n, m)
        flops = 2.0 * n * k * m
        reps = max(3, int(4e4 / max(n, 1)))
        cases = _cases(mm, x, w, b, dy)
        for label, fns in cases.items():
            print(_row(f"{n:>6} rows, {label}", flops, _median_s(fns, args.rounds, reps)))
        med = _median_s(_layer_steps(x, w, b, dy), args.rounds, reps)
        print(_row(f"{n:>6} rows, linear fwd+bwd", 3 * flops, med))


if __name__ == "__main__":
    main()
