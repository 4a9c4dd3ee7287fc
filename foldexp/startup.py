"""What foldexp decides when it is imported: how torch's idle CPU threads wait.

Imported by ``foldexp/__init__.py`` before torch, and free of torch itself, because OpenMP reads
its settings once, when torch loads it. How *many* threads run is ``foldexp/cpus.py``'s rule,
which never reads the load: the count decides the order of float sums, and so the results.

Why. torch's OpenMP threads (GNU libgomp in the CPU wheels) end every parallel region in a
barrier, where a thread that arrives first spins 300,000 turns before it sleeps. When other
processes hold the cores, that spinning thread burns the time slice its descheduled partner
needs: beside 4 busy processes on 2 cores, a 2-thread Tree-LSTM step took 8.7x its quiet time
(``benchmarks/under_load.py``). So, unless the user set either variable or torch came first:

- on a quiet machine, a short spin (``GOMP_SPINCOUNT=10000``): 2% slower when quiet than the
  default spin, half its slowdown under load;
- on a machine already busy when foldexp starts (1-minute load average at least the number of
  cores), threads sleep at once (``OMP_WAIT_POLICY=PASSIVE``): 2 threads beside 4 busy
  processes took 3.1x their quiet step passive, against 5.5x with the short spin.

A wait policy changes when an idle thread sleeps, never which thread adds what: the same thread
count gives the same numbers under either. ``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT`` in the
environment override the choice.
"""

from __future__ import annotations

import os
import sys

__all__ = ["BUSY_AT_START", "machine_busy", "configure_openmp"]

_OPENMP_WAIT = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")


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
