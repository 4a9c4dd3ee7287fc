"""Timing discipline shared by every experiment: environment, stopwatch, interleaved repeats.

- The thread count is set once (``torch.set_num_threads``) and recorded in every row, with the
  device, the torch version and the machine.
- On CUDA the stopwatch synchronises before starting and before stopping, so a timed region is
  the work it launched, not the launch.
- ``run_interleaved`` warms every case up, then runs repeats round-robin -- case A, case B, case C,
  then again in rotated order -- so cases compared in a ratio share the same background load
  (this machine is shared; a ratio of two medians taken minutes apart would measure the
  neighbours). Repeats stop early once a time budget is spent, never before ``min_repeats``.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from foldexp.cpus import available_cpus, threads_for
from foldexp.kernels.native import cpu_fields, cpu_vendor_family

__all__ = ["Env", "setup_env", "Stopwatch", "Case", "round_order", "run_interleaved", "repeats_for"]


@dataclass
class Env:
    """Where the measurements run; every CSV row carries these fields."""

    device: torch.device
    threads: int
    torch_version: str = torch.__version__
    machine: str = field(default_factory=lambda: _machine())

    def fields(self) -> dict[str, Any]:
        return {
            "device": self.device.type,
            "threads": self.threads,
            "torch": self.torch_version,
            "machine": self.machine,
        }


def _machine() -> str:
    cpu = cpu_fields().get("model name") or platform.processor() or platform.machine()
    # VMs often name only the line ("AMD EPYC"), whose generations differ in speed and in the
    # dense route foldexp takes (foldexp/kernels/dense.py): the family tells them apart.
    vendor, family = cpu_vendor_family()
    generation = f", {vendor} family {family}" if vendor else ""
    return f"{platform.node()} ({cpu}{generation}, {os.cpu_count()} cpus)"


def setup_env(device: str, threads: int | None) -> Env:
    """Sets the thread count (``None``: every CPU this process may use, ``foldexp/cpus.py``, as
    a bench's steps are sized for the machine) and checks the device; ``cuda`` without a GPU
    fails here, clearly."""
    if threads is None:
        threads = threads_for(available_cpus(), None)
    torch.set_num_threads(threads)
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        if not torch.cuda.is_available():  # the config's, not a bug: one line, exit status 2
            raise ValueError(
                "device=cuda was asked for but torch sees no CUDA device "
                f"(torch {torch.__version__}, cuda build: {torch.version.cuda}); use device=cpu"
            )
        name = torch.cuda.get_device_name(0)
        return Env(torch.device("cuda"), torch.get_num_threads(), machine=f"{_machine()}, {name}")
    if device != "cpu":
        raise ValueError(f"unknown device {device!r}; expected cpu, cuda or auto")
    return Env(torch.device("cpu"), torch.get_num_threads())


class Stopwatch:
    """Times regions of one step; ``with sw("column"):`` adds that region's seconds."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.times: dict[str, float] = {}
        self._name = ""
        self._t0 = 0.0

    def __call__(self, name: str) -> Stopwatch:
        self._name = name
        return self

    def __enter__(self) -> Stopwatch:
        if self.cuda:
            torch.cuda.synchronize()
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.cuda:
            torch.cuda.synchronize()
        dt = time.perf_counter() - self._t0
        self.times[self._name] = self.times.get(self._name, 0.0) + dt


@dataclass
class Case:
    """One thing to time: ``step(sw)`` does one repetition, timing its regions with ``sw``.

    ``extra`` holds fields copied into every row of this case (e.g. launches per batch).
    """

    name: str
    step: Callable[[Stopwatch], None]
    extra: dict[str, Any] = field(default_factory=dict)


def repeats_for(batch_size: int, repeats: int, boost_below: int) -> int:
    """The paper's rule: batches smaller than ``boost_below`` get proportionally more repeats."""
    if boost_below > 0 and 0 < batch_size < boost_below:
        return repeats * (boost_below // batch_size)
    return repeats


def round_order(cases: list[Case], round_index: int) -> list[Case]:
    """The cases of one round, rotated by the round's index so no case is always first."""
    k = round_index % len(cases)
    return cases[k:] + cases[:k]


def run_interleaved(
    cases: list[Case],
    device: torch.device,
    warmup: int,
    repeats: int,
    budget_s: float = 0.0,
    min_repeats: int = 1,
    on_repeat: Callable[[], None] | None = None,
) -> list[dict[str, Any]]:
    """Warm-up rounds, then round-robin repeats; one record per (case, timed region, repeat).

    Warm-up runs the cases round-robin too: the allocator (and oneDNN's kernel cache) settles
    on the pattern the timed rounds will repeat. Warming each case alone left the heap to grow
    during the first timed rounds (measured: 40,000 page faults in a case's second timed step
    of Table 1 training at batch 256, 0.68 s against a steady 0.37 s).
    """
    for w in range(warmup):
        for case in round_order(cases, w):
            case.step(Stopwatch(device))
    records: list[dict[str, Any]] = []
    start = time.perf_counter()
    for r in range(repeats):
        if r >= min_repeats and budget_s > 0 and time.perf_counter() - start > budget_s:
            break
        for case in round_order(cases, r):
            sw = Stopwatch(device)
            case.step(sw)
            load = os.getloadavg()[0]  # a busy machine explains outliers (see run.summarize)
            for column, seconds in sw.times.items():
                records.append(
                    {"column": column, "repeat": r, "seconds": seconds, "load": load, **case.extra}
                )
        if on_repeat is not None:
            on_repeat()
    return records
