"""Graceful under load: the peers' Tree-LSTM training step, quiet and beside busy processes.

Usage: python benchmarks/under_load.py [--load 4] [--rounds 5] [--steps 2] [--trees 256]
       [--settings 2 2:OMP_WAIT_POLICY=PASSIVE 1 foldexp ...] [--start-loaded]

On a 2-core machine that other processes keep busy, a step with 2 intra-op threads can take many
times its quiet time: torch's OpenMP (GNU libgomp in the CPU wheels) makes every parallel region
end in a barrier, and by default a thread that reaches it first spins (``GOMP_SPINCOUNT``
300,000 turns) before it sleeps, so it burns the time slice that its descheduled partner needs.
This benchmark measures it. Each *setting* (``THREADS[:VAR=VALUE,...]``, the variables set before
torch is imported) runs the peers' engine step (``foldexp/bench/peer_worker.py``: 256 random
trees of 64 leaves, hidden 128, forward + loss + backward) in its own process. Every round times
each setting ``--steps`` steps quiet, then starts ``--load`` busy-loop processes beside them,
times each setting again, and stops the busy loops; the settings' order rotates per round, so
all of them see the same machine. The setting ``foldexp`` takes foldexp's own defaults (its
thread rule, ``foldexp/cpus.py``, and the OpenMP wait chosen when it starts,
``foldexp/startup.py``); with ``--start-loaded``
the busy loops start first and the workers only once the load average has reached the core
count, as for a user who starts a run on a machine that is busy already. Prints per setting
the median step (min-max) quiet and loaded, the slowdown (median loaded / median quiet) and the
quiet cost against the first setting.

The busy loops are this script's own children, stopped (by pid) when it ends, also on errors.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "foldexp" / "bench" / "peer_worker.py"
DEFAULT_SETTINGS = [
    "2",  # torch's threads with libgomp's default wait (spin 300,000 turns, then sleep)
    "2:OMP_WAIT_POLICY=PASSIVE",  # sleep at once at barriers and between regions
    "2:GOMP_SPINCOUNT=10000",  # a short spin, then sleep
    "2:KMP_BLOCKTIME=0",  # Intel OpenMP's knob: libgomp ignores it (a control)
    "1",  # no second thread to wait for
    "foldexp",  # foldexp's defaults: its thread rule, the wait chosen by the load at start
]


@dataclass
class Setting:
    """One configuration, run in its own worker process."""

    label: str
    threads: int | None  # None: foldexp's default
    env: dict[str, str]
    proc: subprocess.Popen | None = None
    quiet: list[float] = field(default_factory=list)
    loaded: list[float] = field(default_factory=list)
    loss: float = float("nan")


def parse_setting(text: str) -> Setting:
    """``"2:OMP_WAIT_POLICY=PASSIVE,GOMP_SPINCOUNT=0"`` → a ``Setting``; ``"foldexp"``: its
    defaults."""
    threads, _, rest = text.partition(":")
    env = dict(kv.split("=", 1) for kv in rest.split(",") if kv)
    return Setting(text, None if threads == "foldexp" else int(threads), env)


def write_trees(path: Path, n: int, leaves: int) -> Path:
    """``n`` random trees of about ``leaves`` leaves (1000 words, seed 0) and a label each
    (5 classes), as the workers read them; the same trees for every benchmark that calls it."""
    from foldexp.bench.trees import make_trees  # numpy only: the driver never imports torch

    trees = make_trees(n, leaves, 1000, 0)
    labels = np.random.default_rng(1).integers(5, size=n).tolist()
    path.write_text(json.dumps({"trees": trees, "labels": labels}))
    return path


def start_worker(s: Setting, params: dict) -> None:
    env = dict(os.environ)
    for var in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME"):  # only what s names
        env.pop(var, None)
    env.update(s.env)
    env.pop("OMP_NUM_THREADS", None)
    if s.threads is not None:
        env["OMP_NUM_THREADS"] = str(s.threads)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    s.proc = subprocess.Popen(
        [sys.executable, str(WORKER), "engine", json.dumps({**params, "threads": s.threads})],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    reply = read_reply(s)
    if reply.get("status") != "ready":
        raise RuntimeError(f"setting {s.label}: worker not ready: {reply}")
    if s.threads is None:
        s.label = f"foldexp ({reply.get('threads')} thr., {reply.get('omp_wait')})"


def read_reply(s: Setting) -> dict:
    assert s.proc is not None and s.proc.stdout is not None
    line = s.proc.stdout.readline()
    if not line:
        raise RuntimeError(f"setting {s.label}: worker exited (rc {s.proc.poll()})")
    return json.loads(line)


def steps(s: Setting, k: int) -> list[float]:
    """Times ``k`` steps back to back in the setting's process."""
    assert s.proc is not None and s.proc.stdin is not None
    s.proc.stdin.write(f"step {k}\n")
    s.proc.stdin.flush()
    reply = read_reply(s)
    if "seconds" not in reply:
        raise RuntimeError(f"setting {s.label}: {reply}")
    s.loss = reply.get("loss", s.loss)
    return reply["seconds"]


def start_load(n: int) -> list[subprocess.Popen]:
    """``n`` single-threaded busy loops, as other users' jobs would be."""
    code = "import time\nwhile True: pass"
    return [subprocess.Popen([sys.executable, "-c", code]) for _ in range(n)]


def wait_for_load(timeout_s: float = 180.0) -> float:
    """Waits until the 1-minute load average reaches the core count (it lags the busy loops by
    about 20 s); returns it."""
    end = time.monotonic() + timeout_s
    while os.getloadavg()[0] < (os.cpu_count() or 1) and time.monotonic() < end:
        time.sleep(1.0)
    return os.getloadavg()[0]


def stop_load(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        p.wait()


def fmt(xs: list[float]) -> str:
    return f"{1e3 * statistics.median(xs):7.0f} ms ({1e3 * min(xs):.0f}-{1e3 * max(xs):.0f})"


def report(settings: list[Setting], args: argparse.Namespace) -> None:
    print(
        f"peers' Tree-LSTM step ({args.trees} random trees x {args.leaves} leaves, hidden "
        f"{args.hidden}, fwd + loss + bwd), {args.rounds} rounds x {args.steps} steps; loaded = "
        f"{args.load} busy-loop processes beside it on {os.cpu_count()} cores"
    )
    base = statistics.median(settings[0].quiet)
    for s in settings:
        q, ld = statistics.median(s.quiet), statistics.median(s.loaded)
        print(
            f"  {s.label:<42s} quiet {fmt(s.quiet)}  loaded {fmt(s.loaded)}  "
            f"slowdown {ld / q:5.2f}x  quiet vs first {q / base:5.2f}x  loss {s.loss:.6f}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--settings", nargs="+", default=DEFAULT_SETTINGS, help="THREADS[:VAR=VAL,..]")
    ap.add_argument("--load", type=int, default=4, help="busy-loop processes in the loaded phase")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=2, help="steps per setting per phase")
    ap.add_argument("--trees", type=int, default=256)
    ap.add_argument("--leaves", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--settle-s", type=float, default=0.5, help="wait after starting the load")
    ap.add_argument(
        "--start-loaded", action="store_true", help="start the workers on a busy machine"
    )
    args = ap.parse_args()

    settings = [parse_setting(t) for t in args.settings]
    load: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory() as tmp:
        trees_file = write_trees(Path(tmp) / "trees.json", args.trees, args.leaves)
        params = {
            "trees_file": str(trees_file),
            "vocab": 1000,
            "embed": args.hidden,
            "hidden": args.hidden,
            "classes": 5,
            "seed": 0,
            "keep_memory": True,
            "onednn": None,  # by CPU vendor, as a run chooses
        }
        try:
            if args.start_loaded:
                load = start_load(args.load)
                print(f"load average {wait_for_load():.1f} when the workers start")
            for s in settings:
                start_worker(s, params)
                steps(s, 1)  # warm-up: oneDNN compiles its shapes, memory is faulted in
            stop_load(load)
            load = []
            for r in range(args.rounds):
                order = settings[r % len(settings) :] + settings[: r % len(settings)]
                for s in order:
                    s.quiet += steps(s, args.steps)
                load = start_load(args.load)
                time.sleep(args.settle_s)
                for s in order:
                    s.loaded += steps(s, args.steps)
                stop_load(load)
                load = []
                time.sleep(args.settle_s)
        finally:
            stop_load(load)
            for s in settings:
                if s.proc is not None and s.proc.poll() is None:
                    s.proc.stdin.write("quit\n")  # type: ignore[union-attr]
                    s.proc.stdin.flush()  # type: ignore[union-attr]
                    s.proc.wait()
    report(settings, args)


if __name__ == "__main__":
    main()
