"""How many intra-op threads a run takes: from the CPUs this process may use and the step's size.

Free of torch (the bench's peer processes read it before torch loads). The rule, in full:

1. **The CPUs this process may use** (``available_cpus``): its affinity mask
   (``os.sched_getaffinity``: what ``taskset`` or a container's cpuset gives it), capped by a
   cgroup CPU quota (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``, in this process's cgroup and its
   parents; a quota of 1.5 CPUs is 1), never ``os.cpu_count()`` alone, which counts the host.
2. **Its share** (``cpu_share``): those CPUs divided among the processes that run side by side
   from one command (DDP ranks on this machine, a sweep's parallel jobs), less the DataLoader
   workers each process starts (each builds batches on a CPU of its own); at least 1.
3. **What the step can use** (``threads_for``): one thread per ``WORK_PER_THREAD``
   multiply-adds of a training step (the model's dense weights times the nodes a batch holds),
   at least 1, at most the share. Why a cap: every op a step runs on several threads wakes them
   and waits for the slowest, a cost per op and per thread; a thread pays only where it gets
   enough arithmetic per step. Measured on a 16-core Intel host: SST's Tree-LSTM (≈ 2.4e8
   multiply-adds per step) trained an epoch in 7.1 s at 2 threads and 10.8–11.9 s at 16, while
   the peers' step (≈ 7e9) went from 1,891 trees/s at 2 threads to 3,766 at 16. One thread per
   1e8 gives SST 2 and the peers' step every core. ``benchmarks/threads.py`` times both at every
   count on the machine at hand.

Nothing here reads the machine's load: the count decides the order of float sums, so a count
that followed the load would make the same seed give other numbers. The load only chooses how
idle threads wait (``foldexp/startup.py``), which changes no result.
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path

__all__ = [
    "WORK_PER_THREAD",
    "available_cpus",
    "cgroup_cpus",
    "cpu_share",
    "threads_for",
]

#: Multiply-adds of a training step per intra-op thread (see the module docstring).
WORK_PER_THREAD = 100_000_000

_CGROUP_ROOT = Path("/sys/fs/cgroup")
_MAX_MICROSECONDS = 10**15  # a quota or period past this (31 years) is no quota

log = logging.getLogger("foldexp.cpus")


def _ratio(quota: str, period: str, source: Path) -> float | None:
    """``quota / period`` in CPUs; a pair that is no quota (a zero or negative period, numbers
    past 10**15: ``cpu.max = "100000 0"`` had divided by zero, a 400-digit quota overflowed a
    float) is warned of and ignored, so the affinity mask decides."""
    try:
        q, p = int(quota), int(period)
    except ValueError:
        q = p = 0
    if not (0 < q <= _MAX_MICROSECONDS and 0 < p <= _MAX_MICROSECONDS):
        log.warning(
            "%s holds %.40r / %.40r, not a CPU quota: ignored (the affinity mask decides)",
            source,
            quota,
            period,
        )
        return None
    return q / p


def _read(path: Path) -> str:
    """A cgroup file's text (any bytes: a non-ASCII name is no reason to fail)."""
    return path.read_bytes().decode("utf-8", "surrogateescape")


def _quota_v2(folder: Path) -> float | None:
    """``cpu.max`` of one cgroup v2 folder as CPUs (``max`` or absent: none)."""
    try:
        fields = _read(folder / "cpu.max").split()
    except OSError:
        return None
    if not fields or fields[0] == "max":
        return None
    return _ratio(fields[0], fields[1] if len(fields) > 1 else "", folder / "cpu.max")


def _quota_v1(folder: Path) -> float | None:
    """``cpu.cfs_quota_us / cpu.cfs_period_us`` of one cgroup v1 cpu folder (-1: none)."""
    try:
        quota = _read(folder / "cpu.cfs_quota_us").strip()
        period = _read(folder / "cpu.cfs_period_us").strip()
    except OSError:
        return None
    return None if quota == "-1" else _ratio(quota, period, folder / "cpu.cfs_quota_us")


def _lowest(quotas: list[float | None]) -> float | None:
    found = [q for q in quotas if q is not None]
    return min(found) if found else None


def cgroup_cpus(root: Path = _CGROUP_ROOT, proc: Path = Path("/proc/self/cgroup")) -> float | None:
    """The CPU quota of this process's cgroup (the lowest along its path to the root), in CPUs;
    ``None`` where there is none or no cgroup file system to read."""
    try:
        lines = _read(proc).splitlines()
    except OSError:
        return None
    quotas: list[float | None] = []
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        rel = Path(path.strip().lstrip("/"))
        if controllers == "":  # cgroup v2: one unified hierarchy
            folders = [root / rel, *(root / p for p in rel.parents)]
            quotas += [_quota_v2(f) for f in folders]
        elif "cpu" in controllers.split(","):
            mount = next(
                (root / n for n in (controllers, "cpu", "cpu,cpuacct") if (root / n).is_dir()), None
            )
            if mount is not None:  # (a container sees its own cgroup as the mount's root)
                quotas += [_quota_v1(mount / f) for f in (rel, *rel.parents)]
    return _lowest(quotas)


def available_cpus() -> int:
    """The CPUs this process may use: its affinity mask, capped by a cgroup quota; at least 1."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cpus = os.cpu_count() or 1
    quota = cgroup_cpus()
    if quota is not None:
        cpus = min(cpus, math.floor(quota))  # 1.5 CPUs of time: 2 threads would queue
    return max(1, cpus)


def cpu_share(cpus: int, processes: int = 1, workers: int = 0) -> int:
    """One process's CPUs when ``processes`` run side by side on ``cpus``, each with
    ``workers`` DataLoader worker processes of its own; at least 1."""
    return max(1, cpus // max(1, processes) - max(0, workers))


def threads_for(share: int, work: float | None) -> int:
    """Intra-op threads for a step of ``work`` multiply-adds on ``share`` CPUs (``None``: a
    step of unknown size takes the share)."""
    if work is None:
        return max(1, share)
    return max(1, min(share, int(work // WORK_PER_THREAD)))
