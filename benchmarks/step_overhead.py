"""What one training step costs in framework overhead, on the route a CUDA run takes.

Usage: python benchmarks/step_overhead.py [--trees 256] [--leaves 64] [--hidden 128]
       [--small-hidden 8] [--repeats 7]

For the peers' workload (``bench=peers``: random binary trees, the Tree-LSTM of
``foldexp/bench/peer_torch.py``) with foldexp's CPU-only kernels off (fused C++ cells, oneDNN),
as on CUDA, prints for the engine (traces cached) and the hand-written level-by-level batching
(``level``):

- ops per step: aten ops dispatched by one forward + backward (``TorchDispatchMode``), views
  apart (they launch no kernel), and the most frequent of the others;
- syncs per step (``aten._local_scalar_dense``: a read that waits for the device) and uploads
  (host-to-device copies, counted with the model on the ``meta`` device);
- the step's time at ``--small-hidden`` on 1 thread, where the time is almost all overhead:
  medians over ``--repeats`` after a warm-up, and the level/engine ratio (same process).

Every figure is measured on the CPU; no GPU is needed.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from foldexp.bench.overhead import count_ops, cuda_route, peers_step


def _median_seconds(step, repeats: int) -> tuple[float, float, float]:
    step()
    step()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times), max(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trees", type=int, default=256)
    ap.add_argument("--leaves", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--small-hidden", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    torch.set_num_threads(1)
    shape = dict(trees=args.trees, leaves=args.leaves)
    print(f"{args.trees} trees of {args.leaves} leaves; CUDA's route (fused cells, oneDNN off)")
    with cuda_route():
        print(f"\nhidden {args.hidden}: one step, forward + backward")
        print(f"{'':8} {'ops':>6} {'views':>6} {'other':>6} {'syncs':>6} {'uploads':>8}  top ops")
        for name in ("engine", "level"):
            step = peers_step(name, hidden=args.hidden, **shape)
            step()
            step()  # traces cached, buffers sized: a step as an epoch's later ones are
            c = count_ops(step)
            meta = peers_step(name, hidden=args.hidden, device="meta", **shape)
            uploads = "-"
            if name == "engine":  # the level peer reads its loss: no meta run for it
                meta()
                uploads = str(count_ops(meta).uploads)
            print(
                f"{name:8} {c.total:6d} {c.views:6d} {c.not_views:6d} {c.syncs:6d} "
                f"{uploads:>8}  {c.top(8)}"
            )
        print(f"\nhidden {args.small_hidden}, 1 thread: step time, median (min-max) ms")
        medians = {}
        for name in ("engine", "level"):
            step = peers_step(name, hidden=args.small_hidden, **shape)
            med, lo, hi = _median_seconds(step, args.repeats)
            medians[name] = med
            print(f"{name:8} {1e3 * med:8.1f} ({1e3 * lo:.1f}-{1e3 * hi:.1f})")
        print(f"level / engine: {medians['level'] / medians['engine']:.2f}x")


if __name__ == "__main__":
    main()
