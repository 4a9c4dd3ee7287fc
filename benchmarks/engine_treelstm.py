"""Engine throughput: Tree-LSTM forward + backward over random binary trees, trees per second.

Usage: python benchmarks/engine_treelstm.py [--trees 256] [--leaves 64] [--hidden 128] [--repeats 5]

Compares, side by side in one process: the engine (trace + schedule + execute + backward), and a
plain per-tree PyTorch loop running the very same modules one node at a time. Reports medians
(min–max) over repeats after a warm-up, with trace/schedule time shown separately.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F

from foldexp import Compiler
from foldexp.kernels import keep_freed_memory
from foldexp.models.tree_lstm import random_tree, tree_lstm_classifier


def eager_loop_step(model: Compiler, trees: list, labels: torch.Tensor) -> None:
    """The plain PyTorch baseline: each tree evaluated on its own, node by node."""
    block = model.root
    logits = torch.stack([block.eval(t) for t in trees])
    F.cross_entropy(logits, labels).backward()


def engine_step(model: Compiler, trees: list, labels: torch.Tensor) -> dict[str, float]:
    t0 = time.perf_counter()
    plan = model.build(trees)
    t1 = time.perf_counter()
    logits = model.run(plan)
    F.cross_entropy(logits, labels).backward()
    t2 = time.perf_counter()
    return {"build": t1 - t0, "run": t2 - t1, "total": t2 - t0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trees", type=int, default=256)
    ap.add_argument("--leaves", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--embed", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--loop-trees", type=int, default=32, help="trees timed for the slow loop")
    ap.add_argument(
        "--no-keep-memory", action="store_true", help="glibc's default freeing, as without "
        "device.keep_memory (foldexp/kernels/memory.py)"
    )  # fmt: skip
    args = ap.parse_args()
    if not args.no_keep_memory:
        keep_freed_memory()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    trees = [random_tree(args.leaves, args.vocab, rng) for _ in range(args.trees)]
    labels = torch.as_tensor(rng.integers(0, 5, size=args.trees))
    block = tree_lstm_classifier(args.vocab, args.embed, args.hidden, 5)
    model = Compiler(block)
    cached = Compiler(block, cache_traces=True)  # same parameters, per-input traces kept

    engine_step(model, trees, labels)  # warm-up
    engine_step(cached, trees, labels)  # warm-up, and fills the trace cache
    runs, cached_runs = [], []
    for _ in range(args.repeats):  # interleaved, so both see the same machine load
        runs.append(engine_step(model, trees, labels))
        cached_runs.append(engine_step(cached, trees, labels))
    model.zero_grad()
    sub, sub_labels = trees[: args.loop_trees], labels[: args.loop_trees]
    eager_loop_step(model, sub[:4], sub_labels[:4])
    loop = []
    for _ in range(max(1, args.repeats // 2)):
        t0 = time.perf_counter()
        eager_loop_step(model, sub, sub_labels)
        loop.append(time.perf_counter() - t0)

    def fmt(xs: list[float]) -> str:
        return f"{statistics.median(xs):.4f} s (min {min(xs):.4f}, max {max(xs):.4f})"

    total = [r["total"] for r in runs]
    print(
        f"Tree-LSTM fwd+bwd, {args.trees} random trees x {args.leaves} leaves, hidden "
        f"{args.hidden}, embed {args.embed}, {torch.get_num_threads()} threads, torch "
        f"{torch.__version__}"
    )
    print(
        f"  engine step     {fmt(total)}  -> {args.trees / statistics.median(total):8.1f} trees/s"
    )
    print(f"    trace+schedule {fmt([r['build'] for r in runs])}")
    print(f"    execute+bwd    {fmt([r['run'] for r in runs])}")
    ctotal = [r["total"] for r in cached_runs]
    print(
        f"  engine, cached traces {fmt(ctotal)} -> {args.trees / statistics.median(ctotal):.1f} "
        "trees/s"
    )
    print(f"    schedule only  {fmt([r['build'] for r in cached_runs])}")
    print(
        f"    calls/batch {model.last_stats['calls']}, max depth {model.last_stats['max_depth']}, "
        f"nodes {model.last_stats['nodes']}"
    )
    per_tree_loop = statistics.median(loop) / len(sub)
    print(f"  per-tree loop   {fmt(loop)} for {len(sub)} trees -> {1 / per_tree_loop:8.1f} trees/s")
    print(f"  speedup engine / loop: {per_tree_loop * args.trees / statistics.median(total):.1f}x")


if __name__ == "__main__":
    main()
