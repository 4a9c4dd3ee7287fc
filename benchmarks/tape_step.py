"""The tape against the per-group route and the floor: one training step, host-bound.

Usage: python benchmarks/tape_step.py [--trees 8] [--leaves 64] [--hidden 8] [--rounds 60]
       [--route cuda|cpu] [--modes off,graphs,inductor] [--threads 1]

For the peers' workload (``foldexp/bench/overhead.py``: random binary trees, the Tree-LSTM of
``foldexp/bench/peer_torch.py``), builds one step for each ``device.compile`` mode with
foldexp's cells (``engine``) and with a user's plain cells (``engine_plain``), and the floor
(``bench/floor.py``: the engine's arithmetic as the fewest calls, backward by hand). The steps
are timed interleaved, round after round, so that whatever else the machine does falls on all
of them alike; it prints each step's p10 and median over the rounds and p10 / the floor's p10.
``--route cuda`` turns foldexp's CPU-only kernels off, as on CUDA (``overhead.cuda_route``);
``--route cpu`` keeps them. Also printed: each step's first two calls (the captures, and for
``inductor`` the compile, warm or cold as Inductor's cache is) and the calls into autograd's
engine per step besides the step's own ``backward()`` (``executor/run.py``'s per-group
``_group_grads``).
"""

from __future__ import annotations

import argparse
import contextlib
import time

import torch

from foldexp.bench.overhead import cuda_route, peers_step
from foldexp.executor import run, set_compile_mode


def _counting() -> list[int]:
    calls = [0]
    real = run._group_grads

    def counted(*a, **k):
        calls[0] += 1
        return real(*a, **k)

    run._group_grads = counted  # type: ignore[assignment]
    return calls


def _build(args: argparse.Namespace) -> dict[str, tuple[str | None, object]]:
    shape = dict(trees=args.trees, leaves=args.leaves, hidden=args.hidden)
    steps: dict[str, tuple[str | None, object]] = {}
    entries = _counting()
    for cells in ("engine", "engine_plain"):
        for mode in args.modes.split(","):
            set_compile_mode(mode)
            step = peers_step(cells, **shape)
            start = time.perf_counter()
            step()
            step()
            first = time.perf_counter() - start
            entries[0] = 0
            step()
            label = f"{cells} {mode}"
            print(f"{label:22} first two steps {first:6.1f} s, engine calls a step {entries[0]}")
            steps[label] = (mode, step)
    try:
        steps["floor"] = (None, peers_step("floor", **shape))
    except ValueError as e:
        print(f"floor: none ({e})")
    return steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trees", type=int, default=8)
    ap.add_argument("--leaves", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--route", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--modes", default="off,graphs,inductor")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    route = cuda_route() if args.route == "cuda" else contextlib.nullcontext()
    print(f"{args.trees} trees of {args.leaves} leaves, hidden {args.hidden}, "
          f"{args.threads} thread(s), {args.route}'s route")  # fmt: skip
    with route:
        steps = _build(args)
        times: dict[str, list[float]] = {k: [] for k in steps}
        for _ in range(args.rounds):
            for label, (mode, step) in steps.items():
                if mode is not None:
                    set_compile_mode(mode)
                start = time.perf_counter()
                step()  # type: ignore[operator]
                times[label].append(time.perf_counter() - start)
    p10 = {k: sorted(v)[len(v) // 10] for k, v in times.items()}
    floor = p10.get("floor")
    for label, v in times.items():
        ratio = f"  {p10[label] / floor:5.2f}x the floor" if floor else ""
        print(f"{label:22} p10 {1e3 * p10[label]:7.2f} ms  median "
              f"{1e3 * sorted(v)[len(v) // 2]:7.2f} ms{ratio}")  # fmt: skip


if __name__ == "__main__":
    main()
