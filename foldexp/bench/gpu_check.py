"""``make gpu-check``: the whole project checked on this machine's GPU in a few minutes.

``python -m foldexp.bench.gpu_check`` (from the repository's root, with foldexp and a CUDA build
of torch installed):

1. runs the ``gpu``-marked tests (``tests/``: every block family and model batched == eager on
   CUDA and equal to the CPU, runs trained, resumed, moved between devices, predicted and
   evaluated on CUDA, every optimizer, a step without host syncs);
2. trains every experiment preset on CUDA for one short epoch (``trainer.limit_batches``), each
   in its own ``foldexp train`` process; presets whose data files are absent here (SST, the
   molecule sets: ``foldexp data fetch``) or that need a file of the user's are reported as
   such, not failed;
3. times one training step of the peers' workload (``bench=peers``: 256 random trees of 64
   leaves, hidden 128) on CUDA, for the engine and the hand-written level batching, in trees/s;

then prints one table and exits 0 when every test passed and every runnable preset trained.
On a machine without a CUDA device it says so in one line and exits 2. Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import torch

__all__ = ["main"]

NO_DEVICE = 2
# Exit 2 from ``foldexp train`` with one of these in its last line: the preset's data is not
# on this machine (or is the user's own file), which is not the GPU's failure.
_NO_DATA = re.compile(r"expected an existing file|not found|foldexp data fetch|dataset\.path")
# Presets that train from another preset's run (distillation from a teacher run): that preset
# and the arguments that point at its run folder.
_TEACHERS = {"sst_treelstm_fold_distill": ("sst_treelstm_fold", "model.teacher=[{run}]")}


def _tests(root: Path, out: Path, timeout: float) -> dict[str, int]:
    """Runs the gpu tests; their counts from pytest's JUnit report."""
    report = out / "gpu-tests.xml"
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider"]
    cmd += [f"--junitxml={report}", str(root / "tests")]
    if importlib.util.find_spec("xdist") is not None:
        # The tests share one GPU well (small models); pytest-benchmark refuses xdist's workers.
        cmd += ["-n", str(min(8, os.cpu_count() or 1)), "-p", "no:benchmark"]
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    try:
        proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"gpu tests: no result within {timeout:.0f} s", file=sys.stderr)
        counts["failed"] = 1
        return counts
    if not report.exists():
        print(proc.stdout[-3000:] + proc.stderr[-3000:], file=sys.stderr)
        counts["failed"] = 1
        return counts
    for case in ET.parse(report).getroot().iter("testcase"):
        kinds = {child.tag for child in case}
        if kinds & {"failure", "error"}:
            counts["failed"] += 1
            why = next(c for c in case if c.tag in ("failure", "error")).get("message") or ""
            print(
                f"FAILED {case.get('classname')}::{case.get('name')}: {why[:500]}", file=sys.stderr
            )
        elif "skipped" in kinds:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    return counts


def _presets(root: Path) -> list[str]:
    return sorted(p.stem for p in (root / "foldexp" / "conf" / "experiment").glob("*.yaml"))


def _train(
    name: str, out: Path, batches: int, timeout: float, device: str
) -> tuple[str, float | None]:
    """One short epoch of preset ``name`` on ``device``: (status, epoch seconds)."""
    folder = out / name
    cmd = [sys.executable, "-m", "foldexp.cli", "train", f"experiment={name}", f"device={device}"]
    if name in _TEACHERS:
        teacher, arg = _TEACHERS[name]
        if not (out / teacher / "results.json").exists():  # the teacher trained to its end
            return f"no {teacher} run to learn from", None
        cmd.append(arg.format(run=out / teacher))
    cmd += ["trainer.epochs=1", f"trainer.limit_batches={batches}", "trainer.progress=false"]
    cmd += ["trainer.plots=false", f"hydra.run.dir={folder}"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"timed out after {timeout:.0f} s", None
    last = (proc.stderr.strip().splitlines() or proc.stdout.strip().splitlines() or [""])[-1]
    if proc.returncode == 2 and _NO_DATA.search(last):
        return "no data here", None
    (out / f"{name}.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        print(f"{name}: exit {proc.returncode}: {last} (log: {out / name}.log)", file=sys.stderr)
        return f"FAILED (exit {proc.returncode})", None
    metrics = folder / "metrics.csv"
    lines = metrics.read_text().splitlines() if metrics.exists() else []
    if len(lines) < 2:
        return "FAILED (no metrics.csv row)", None
    header, row = lines[0].split(","), lines[1].split(",")
    return "ok", float(row[header.index("epoch_seconds")])


def _peers(repeats: int, trees: int, device: str) -> dict[str, float]:
    """Trees per second of one training step of the peers' workload on ``device``."""
    from foldexp.bench.overhead import peers_step

    def wait() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    rates = {}
    for name in ("engine", "level"):
        step = peers_step(name, trees=trees, device=device)
        for _ in range(2):
            step()
        times = []
        for _ in range(repeats):
            wait()
            t0 = time.perf_counter()
            step()
            wait()
            times.append(time.perf_counter() - t0)
        rates[name] = trees / statistics.median(times)
    return rates


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="gpu-check", description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=20, help="batches of each preset's epoch")
    ap.add_argument("--repeats", type=int, default=5, help="timed peers' steps")
    ap.add_argument("--skip-tests", action="store_true", help="only train and time")
    ap.add_argument("--presets", default="", help="comma-separated presets (default: all)")
    ap.add_argument("--trees", type=int, default=256, help="trees of the peers' step")
    ap.add_argument(
        "--keep", default="", help="a folder to keep the tests' JUnit report and the runs in"
    )
    # The same checks on another device, to try the script itself where there is no GPU.
    ap.add_argument("--device", default="cuda", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
        print(
            f"gpu-check: no CUDA device present (torch {torch.__version__}, {build}); "
            "run it on a machine with an NVIDIA GPU and a CUDA build of torch",
            file=sys.stderr,
        )
        return NO_DEVICE
    root = Path(__file__).resolve().parents[2]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        out = Path(args.keep or tmp)
        out.mkdir(parents=True, exist_ok=True)
        tests = (
            {"passed": 0, "failed": 0, "skipped": 0}
            if args.skip_tests
            else _tests(root, out, timeout=240)
        )
        names = args.presets.split(",") if args.presets else _presets(root)
        # A teacher's run first, so that its student finds it.
        names.sort(key=lambda n: n in _TEACHERS)
        runs = {n: _train(n, out, args.batches, 60, args.device) for n in names}
    peers = _peers(args.repeats, args.trees, args.device)
    where = torch.cuda.get_device_name() if args.device == "cuda" else args.device
    print(f"\ngpu-check on {where} (torch {torch.__version__})\n")
    print("| what | result |\n|---|---|")
    print(f"| gpu tests | {tests['passed']} passed, {tests['failed']} failed, "
          f"{tests['skipped']} skipped |")  # fmt: skip
    for name, (status, seconds) in runs.items():
        shown = f"{seconds:.2f} s" if seconds is not None else "-"
        print(f"| train {name}, 1 epoch of <= {args.batches} batches | {status}, {shown} |")
    for name, rate in peers.items():
        shape = f"{args.trees} trees of 64 leaves, hidden 128"
        print(f"| peers' training step, {name} ({shape}) | {rate:.0f} trees/s |")
    print(f"\ntotal {time.perf_counter() - started:.0f} s")
    failed = tests["failed"] or any(s.startswith(("FAILED", "timed")) for s, _ in runs.values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
