"""What foldexp decides when it is imported: how torch's CPU threads wait, and how many to run.

Imported by ``foldexp/__init__.py`` before torch, and free of torch itself, because OpenMP reads
its settings once, when torch loads it.

Why. torch's OpenMP threads (GNU libgomp in the CPU wheels) end every parallel region in a
barrier, where a thread that arrives first spins 300,000 turns before it sleeps. When other
processes hold the cores, that spinning thread burns the time slice its descheduled partner
needs: beside 4 busy processes on 2 cores, a 2-thread Tree-LSTM step took 8.7x its quiet time
(``benchmarks/under_load.py``). So, unless the user set either variable or torch came first:

- on a quiet machine, a short spin (``GOMP_SPINCOUNT=10000``): 2% slower when quiet than the
  default spin, half its slowdown under load;
- on a machine already busy when foldexp starts (1-minute load average at least the number of
  cores), threads sleep at once (``OMP_WAIT_POLICY=PASSIVE``) and a run takes **one** intra-op
  thread (``default_threads``): each of the 2 threads would get a third of a core and wait for
  the other at every op, while one thread gets its share and waits for nobody. Measured beside
  4 busy processes: 2 threads passive 3.1x their quiet step, 1 thread 2.2x its own and faster
  in absolute terms too (781 against 989 ms).

``device.threads`` (an explicit count) overrides the choice of threads; ``OMP_WAIT_POLICY`` or
``GOMP_SPINCOUNT`` in the environment override the wait. Load that comes or goes during a run is
``foldexp/governor.py``'s concern.
"""

from __future__ import annotations

import os
import sys

__all__ = ["BUSY_AT_START", "machine_busy", "configure_openmp", "default_threads"]

_OPENMP_WAIT = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
QUIET_THREADS = 2  # intra-op threads on a quiet machine (this project's 2-core machines)


def machine_busy() -> bool:
    """Whether other work already holds the cores: 1-minute load average ≥ the core count."""
    try:
        return os.getloadavg()[0] >= (os.cpu_count() or 1)
    except OSError:  # no load average on this platform
        return False


BUSY_AT_START = machine_busy()


def configure_openmp() -> None:
    """Sets OpenMP's wait policy for torch, unless the user did or torch is loaded already."""
    if "torch" in sys.modules or any(v in os.environ for v in _OPENMP_WAIT):
        return  # a user's setting wins; after torch loaded, a change would only mislead
    if BUSY_AT_START:
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    else:
        os.environ["GOMP_SPINCOUNT"] = "10000"


def default_threads(requested: int | None = None) -> int:
    """The intra-op thread count to run: ``requested`` when given (0 = torch's own default),
    else 1 on a machine that was busy when foldexp started, else ``QUIET_THREADS`` (at most the
    cores)."""
    if requested is not None:
        return requested
    if BUSY_AT_START:
        return 1
    return max(1, min(QUIET_THREADS, os.cpu_count() or 1))
