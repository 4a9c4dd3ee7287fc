"""What one training step costs in framework overhead, on the route a CUDA run takes.

Usage: python benchmarks/step_overhead.py [--trees 256] [--leaves 64] [--hidden 128]
       [--small-hidden 8] [--repeats 7] [--device cpu|cuda]

For the peers' workload (``bench=peers``: random binary trees, the Tree-LSTM of
``foldexp/bench/peer_torch.py``) with foldexp's CPU-only kernels off (fused C++ cells, oneDNN),
as on CUDA, prints for the engine (traces cached), the hand-written level-by-level batching
(``level``) and the floor under both (``floor``: the engine's calls alone, backward by hand,
``foldexp/bench/floor.py``):

- ops per step: aten ops dispatched by one forward + backward (``TorchDispatchMode``), views
  apart (they launch no kernel), and the most frequent of the others; the engine's both where
  Triton is absent (torch's ops for the updates) and with the Triton kernels of a CUDA run,
  each launch counted as one op (``foldexp/bench/stand_in.py``);
- syncs per step (``aten._local_scalar_dense``: a read that waits for the device) and uploads
  (host-to-device copies, counted with the model on the ``meta`` device);
- the step's time at ``--small-hidden`` on 1 thread: medians over ``--repeats`` after a
  warm-up, the level/engine and level/floor ratios (same process), and the engine's time above
  the floor (its own overhead); the engine both with torch's ops for the updates and with one
  kernel call each way for the binary update (the peers' 17 groups of 18), as on CUDA (the
  CPU's C++ update standing in for the Triton launch: ``stand_in.triton_stand_in``).

Every figure above is measured on the CPU; no GPU is needed. With ``--device cuda`` it measures
the same steps on the GPU instead: aten ops (not views) and kernels and memory copies launched
per step (torch's profiler), the time the GPU was busy, the step's wall time (median, the
device synchronized), and whether the engine's step runs under
``torch.cuda.set_sync_debug_mode("error")``; the engine with its Triton kernels and with
torch's ops for the updates.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
import warnings

import torch

from foldexp.bench.overhead import count_kernels, count_ops, cuda_route, peers_step
from foldexp.bench.stand_in import triton_stand_in

# (step, label, route): the engine where Triton is absent and with CUDA's Triton kernels
_COUNTED = [
    ("engine", "engine, ops", contextlib.nullcontext),
    ("engine", "engine, triton", triton_stand_in),
    ("level", "level", contextlib.nullcontext),
    ("floor", "floor", contextlib.nullcontext),
]


# (step, label, route) timed at the small width: the engine with torch's ops for the updates and
# with one kernel call each way for the binary update (the CPU's C++ update standing in for
# CUDA's Triton launch)
_TIMED = [
    ("engine", "engine, ops", contextlib.nullcontext),
    ("engine", "engine, one-kernel cells", lambda: triton_stand_in(native=True)),
    ("floor", "floor", contextlib.nullcontext),
    ("level", "level", contextlib.nullcontext),
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
    with its Tree-LSTM update in Triton kernels (where Triton is present) and in torch's ops."""
    try:
        from foldexp.kernels.treelstm_triton import set_triton_cells_enabled
    except ImportError:  # a foldexp from before the Triton cells: measured as it is
        set_triton_cells_enabled = None
    shape = dict(trees=args.trees, leaves=args.leaves)
    print(f"{args.trees} trees of {args.leaves} leaves on {torch.cuda.get_device_name()}")
    print(
        f"{'':14} {'hidden':>6} {'ops':>5} {'kernels':>8} {'copies':>6} {'busy ms':>8} "
        f"{'step ms':>8}  syncs"
    )
    # (step, label, Triton cells)
    runs = [("engine", "engine, triton", True), ("engine", "engine, ops", False),
            ("level", "level", True), ("floor", "floor", True)]  # fmt: skip
    if set_triton_cells_enabled is None:  # a foldexp from before the Triton cells (no floor)
        runs = [("engine", "engine, ops", False), ("level", "level", False)]
    for hidden in (args.hidden, args.small_hidden):
        for name, label, triton in runs:
            if set_triton_cells_enabled is not None:
                set_triton_cells_enabled(triton)
            step = _step(name, hidden=hidden, device="cuda", **shape)
            if step is None:
                continue
            med, _, _ = _median_seconds(step, args.repeats, torch.cuda.synchronize)
            k = count_kernels(step)
            ops = count_ops(step).not_views  # aten ops; Triton's launches are kernels only
            syncs = "-"  # the floor has no autograd to sync
            if name == "engine":
                syncs = _syncs_allowed(step)
            elif name == "level":
                syncs = "reads its loss"
            print(
                f"{label:14} {hidden:6d} {ops:5d} {k.launches:8d} {k.copies:6d} "
                f"{k.busy_us / 1e3:8.2f} {1e3 * med:8.2f}  {syncs}"
            )
            if hidden == args.hidden:
                print(f"{'':23} top: {k.top()}")
    if set_triton_cells_enabled is not None:
        set_triton_cells_enabled(True)


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
        for name, label, route in _COUNTED:
            with route():
                step = _step(name, hidden=args.hidden, **shape)
                if step is None:
                    continue
                step()
                step()  # traces cached, buffers sized: a step as an epoch's later ones are
                c = count_ops(step)
                uploads = "-"
                if name == "engine":  # level reads its loss, the floor needs a kernel: no meta
                    meta = peers_step(name, hidden=args.hidden, device="meta", **shape)
                    meta()
                    uploads = str(count_ops(meta).uploads)
            print(
                f"{label:15} {c.total:6d} {c.views:6d} {c.not_views:6d} {c.syncs:6d} "
                f"{uploads:>8}  {c.top(8)}"
            )
        print(f"\nhidden {args.small_hidden}, 1 thread: step time, median (min-max) ms")
        medians = {}
        for name, label, route in _TIMED:
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
