"""The same config and seed give the same numbers beside busy processes as on a quiet machine.

Each run is a ``foldexp train`` process of its own, as a user's is: what foldexp decides at
start-up (``foldexp/startup.py``) sees that process's machine. The machine is made busy for
real (a busy loop on every CPU this process may use, started here and stopped by pid), and the
1-minute load average that start-up reads is set in the child before foldexp is imported: it
takes a minute of load to climb, and this machine's other jobs move it, so the test fixes what
each run is told rather than waiting on it. Until the thread count stopped following the load,
a run that started busy took 1 thread where a quiet one took 2, and its sums came out in another
order (``train_loss`` differed in the 7th digit).

The model is large enough that the thread rule (``foldexp/cpus.py``) gives 2 threads on 2 CPUs,
so both runs sum over several threads; at 1 thread against 2 its first epoch's ``train_loss``
differs in the 8th digit.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
import torch

from foldexp.cpus import available_cpus

OVERRIDES = [
    "dataset.n=1500",
    "trainer.epochs=2",
    "trainer.batch_size=128",
    "trainer.progress=false",
    "trainer.plots=false",
    "model.hidden_size=128",
]
QUIET = "import os; os.getloadavg = lambda: (0.0, 0.0, 0.0); "
BUSY = "import os; os.getloadavg = lambda: (1e6, 1e6, 1e6); "
MAIN = "import sys; from foldexp.cli import main; main(sys.argv[1:])"
TIMINGS = ("epoch_seconds",)  # metrics.csv's only column that is a clock reading


def _train(load: str, overrides: list[str], out: Path) -> list[str]:
    return [sys.executable, "-c", load + MAIN, "train", *overrides, f"hydra.run.dir={out}"]


def _run(load: str, overrides: list[str], out: Path) -> None:
    done = subprocess.run(_train(load, overrides, out), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr


@contextlib.contextmanager
def busy_cpus() -> Iterator[None]:
    """A busy loop on every CPU this process may use, for as long as the block runs."""
    loops = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(available_cpus())
    ]
    try:
        yield
    finally:
        for proc in loops:
            proc.send_signal(signal.SIGKILL)
            proc.wait()


def _numbers(out: Path) -> tuple[pd.DataFrame, dict, dict]:
    """metrics.csv less its timings, results.json less its seconds and config, the best weights."""
    metrics = pd.read_csv(out / "metrics.csv").drop(columns=list(TIMINGS))
    results = json.loads((out / "results.json").read_text())
    results.pop("train_seconds")
    results.pop("config")  # what was asked (its folder, trainer.resume), not what came of it
    weights = torch.load(out / "checkpoints" / "best.pt", weights_only=True)["model"]
    return metrics, results, weights


def _assert_same(a: Path, b: Path) -> None:
    (ma, ra, wa), (mb, rb, wb) = _numbers(a), _numbers(b)
    pd.testing.assert_frame_equal(ma, mb, check_exact=True)
    assert ra == rb
    assert wa.keys() == wb.keys()
    assert all(torch.equal(wa[k], wb[k]) for k in wa), "the best weights differ"


def test_a_run_started_beside_busy_processes_equals_a_quiet_one(tmp_path: Path) -> None:
    _run(QUIET, OVERRIDES, tmp_path / "quiet")
    with busy_cpus():
        _run(BUSY, OVERRIDES, tmp_path / "busy")
    _assert_same(tmp_path / "quiet", tmp_path / "busy")
    threads = json.loads((tmp_path / "busy" / "results.json").read_text())["threads"]
    assert threads == min(2, available_cpus())
    info = json.loads((tmp_path / "busy" / "run_info.json").read_text())
    assert info["threads"] == info["config"]["device"]["threads"] == threads


def test_a_run_killed_and_resumed_under_load_equals_an_uninterrupted_one(tmp_path: Path) -> None:
    args = [*OVERRIDES, "trainer.checkpoint_every=2"]
    _run(QUIET, args, tmp_path / "ref")
    killed = tmp_path / "killed"
    last = killed / "checkpoints" / "last.pt"
    with busy_cpus():
        proc = subprocess.Popen(
            _train(BUSY, args, killed), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            deadline = time.monotonic() + 300
            while not last.exists() and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.01)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        assert last.exists(), "the run died before its first checkpoint"
        _run(BUSY, [*args, "trainer.resume=true"], killed)
    _assert_same(tmp_path / "ref", killed)


def test_taskset_one_cpu_trains_on_one_thread(tmp_path: Path) -> None:
    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("no CPU affinity on this platform")
    cpu = min(os.sched_getaffinity(0))
    proc = subprocess.run(
        _train(f"import os; os.sched_setaffinity(0, {{{cpu}}}); ", OVERRIDES, tmp_path),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads((tmp_path / "results.json").read_text())["threads"] == 1
