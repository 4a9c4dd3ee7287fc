"""oneDNN against torch's default (MKL) for the three matmuls of a linear layer's training step.

Usage: python benchmarks/onednn_linear.py [--threads 2] [--rows 16384 4096 1024 256 25 8 1]

For a Tree-LSTM gate layer (input 256, output 640: hidden 128) at each row count, times the
forward (``x Wᵀ + b``), the input gradient (``dy W``) and the weight gradient (``dyᵀ x``) both
ways, alternating A and B round by round, and prints medians as GFLOP/s (µs for tiny calls)
with the oneDNN/MKL speed ratio. Then the same for a whole ``foldexp.kernels.linear`` forward +
backward against ``F.linear``, which is what ``Linear`` layers in the models run. This is the
measurement behind ``foldexp/kernels/dense.py`` and its ``MIN_ROWS``.
"""

from __future__ import annotations

import argparse
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", type=int, nargs="+", default=[16384, 4096, 1024, 256, 25, 8, 1])
    ap.add_argument("--in-features", type=int, default=256)
    ap.add_argument("--out-features", type=int, default=640)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if not dense.onednn_enabled():
        raise SystemExit("this torch has no oneDNN (torch.backends.mkldnn): nothing to compare")
    k, m = args.in_features, args.out_features
    mm = dense._mm
    print(f"torch {torch.__version__}, {args.threads} threads, layer {k} -> {m}")
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
