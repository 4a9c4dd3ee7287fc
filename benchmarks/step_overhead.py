"""What one training step costs in framework overhead, on the route a CUDA run takes.

Usage: python benchmarks/step_overhead.py [--trees 256] [--leaves 64] [--hidden 128]
       [--small-hidden 8] [--repeats 7] [--device cpu|cuda]

For the peers' workload (``bench=peers``: random binary trees, the Tree-LSTM of
``foldexp/bench/peer_torch.py``) with foldexp's CPU-only kernels off (fused C++ cells, oneDNN),
as on CUDA, prints for the engine (traces cached), the hand-written level-by-level batching
(``level``) and the floor under both (``floor``: the fewest calls for the step, backward by hand,
``foldexp/bench/floor.py``):

- ops per step: aten ops dispatched by one forward + backward (``TorchDispatchMode``), views
  apart (they launch no kernel), and the most frequent of the others; the engine's both on the
  per-group route (``device.compile=off``) and on the tape with its captured graphs run as they
  are (``graphs``: the ops Inductor then fuses; ``executor/tape.py``);
- syncs per step (``aten._local_scalar_dense``: a read that waits for the device) and uploads
  (host-to-device copies, counted with the model on the ``meta`` device);
- the step's time at ``--small-hidden`` on 1 thread: medians over ``--repeats`` after a
  warm-up, the level/engine and level/floor ratios (same process), and the engine's time above
  the floor (its own overhead); the engine on the per-group route and on the tape (``graphs``).
  ``benchmarks/tape_step.py`` times the tape's modes, Inductor's included, round by round.

Every figure above is measured on the CPU; no GPU is needed. With ``--device cuda`` it measures
the same steps on the GPU instead: aten ops (not views) and kernels and memory copies launched
per step (torch's profiler), the time the GPU was busy, the step's wall time (median, the
device synchronized), and whether the engine's step runs under
``torch.cuda.set_sync_debug_mode("error")``; the engine on the tape as CUDA's default runs it
(``inductor`` where Triton is installed) and on the per-group route.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
import warnings

import torch

from foldexp.bench.overhead import count_kernels, count_ops, cuda_route, peers_step
from foldexp.executor import compiling

# (step, label, route): the engine on the per-group route and on the tape (its graphs as they
# are, so that the count sees their aten ops), the level batching, the floor
_ROUTES = [
    ("engine", "engine, off", lambda: compiling("off")),
    ("engine", "engine, tape", lambda: compiling("graphs")),
    ("level", "level", contextlib.nullcontext),
    ("floor", "floor", contextlib.nullcontext),
]


def _median_seconds(step, repeats: int, wait=lambda: None) -> tuple[float, float, float]:
    step()
    step()
    times = []
    for _ in range(repeats):
        wait()
        t0 = time.perf_counter()
        step()
        wait()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times), max(times)


def _step(name: str, **kw):
    """``peers_step(name, **kw)``, or ``None`` (said so) for a floor that no update kernel
    serves: no C++ compiler on a CPU, no Triton on CUDA."""
    try:
        return peers_step(name, **kw)
    except ValueError:
        if name != "floor":
            raise
        print(f"floor: none (no update kernel serves {kw.get('device', 'cpu')})")
        return None


def _syncs_allowed(step) -> str:
    """``none`` when ``step`` runs with every host sync an error, else the error's first line."""
    with warnings.catch_warnings():  # torch calls the mode a prototype, once a process
        warnings.simplefilter("ignore", UserWarning)
        torch.cuda.set_sync_debug_mode("error")
    try:
        step()
    except RuntimeError as err:
        return str(err).splitlines()[0][:60]
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return "none"


def on_cuda(args: argparse.Namespace) -> None:
    """The same steps on the GPU: kernels per step, busy time, wall time, host syncs; the engine
    on the tape (CUDA's default mode) and on the per-group route."""
    shape = dict(trees=args.trees, leaves=args.leaves)
    print(f"{args.trees} trees of {args.leaves} leaves on {torch.cuda.get_device_name()}")
    print(
        f"{'':14} {'hidden':>6} {'ops':>5} {'kernels':>8} {'copies':>6} {'busy ms':>8} "
        f"{'step ms':>8}  syncs"
    )
    # (step, label, device.compile): None is CUDA's default
    runs = [("engine", "engine, tape", None), ("engine", "engine, off", "off"),
            ("level", "level", None), ("floor", "floor", None)]  # fmt: skip
    for hidden in (args.hidden, args.small_hidden):
        for name, label, mode in runs:
            with compiling(mode):
                step = _step(name, hidden=hidden, device="cuda", **shape)
                if step is None:
                    continue
                med, _, _ = _median_seconds(step, args.repeats, torch.cuda.synchronize)
                k = count_kernels(step)
                ops = count_ops(step).not_views  # aten ops; compiled kernels are kernels only
                syncs = "-"  # the floor has no autograd to sync
                if name == "engine":
                    syncs = _syncs_allowed(step)
            if name == "level":
                syncs = "reads its loss"
            print(
                f"{label:14} {hidden:6d} {ops:5d} {k.launches:8d} {k.copies:6d} "
                f"{k.busy_us / 1e3:8.2f} {1e3 * med:8.2f}  {syncs}"
            )
            if hidden == args.hidden:
                print(f"{'':23} top: {k.top()}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trees", type=int, default=256)
    ap.add_argument("--leaves", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--small-hidden", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = ap.parse_args()
    if args.device == "cuda":
        on_cuda(args)
        return
    torch.set_num_threads(1)
    shape = dict(trees=args.trees, leaves=args.leaves)
    print(f"{args.trees} trees of {args.leaves} leaves; CUDA's route (fused cells, oneDNN off)")
    with cuda_route():
        print(f"\nhidden {args.hidden}: one step, forward + backward")
        print(f"{'':15} {'ops':>6} {'views':>6} {'other':>6} {'syncs':>6} {'uploads':>8}  top ops")
        for name, label, route in _ROUTES:
            with route():
                step = _step(name, hidden=args.hidden, **shape)
                if step is None:
                    continue
                step()
                step()  # traces cached, buffers sized: a step as an epoch's later ones are
                c = count_ops(step)
                uploads = "-"
                # level reads its loss, the floor needs a kernel: no meta; on ``meta`` the
                # tape's check against eager cannot read values, so only the per-group route
                if label == "engine, off":
                    meta = peers_step(name, hidden=args.hidden, device="meta", **shape)
                    meta()
                    uploads = str(count_ops(meta).uploads)
            print(
                f"{label:15} {c.total:6d} {c.views:6d} {c.not_views:6d} {c.syncs:6d} "
                f"{uploads:>8}  {c.top(8)}"
            )
        print(f"\nhidden {args.small_hidden}, 1 thread: step time, median (min-max) ms")
        medians = {}
        for name, label, route in _ROUTES:
            with route():
                step = _step(name, hidden=args.small_hidden, **shape)
                if step is None:
                    continue
                med, lo, hi = _median_seconds(step, args.repeats)
            medians[label] = med
            print(f"{label:24} {1e3 * med:6.1f} ({1e3 * lo:.1f}-{1e3 * hi:.1f})")
        for label in [k for k in medians if k != "level"]:
            print(f"level / {label}: {medians['level'] / medians[label]:.2f}x")
        for label in [k for k in medians if k.startswith("engine") and "floor" in medians]:
            own = 1e3 * (medians[label] - medians["floor"])
            print(f"{label} - floor (the engine's own overhead): {own:.1f} ms")


if __name__ == "__main__":
    main()
