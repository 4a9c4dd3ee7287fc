"""Intra-op threads that follow the machine's load while a run goes on.

Why: ``foldexp/startup.py`` picks one thread for a run that starts on a busy machine, because
two threads that each get a fraction of a core wait for each other at every op (a 2-thread
Tree-LSTM step beside 4 busy processes on 2 cores: 5.5x its quiet time with the short spin,
against 2.2x for one thread). Load that arrives *after* the start hit the 2-thread run all the
same. ``ThreadGovernor.tick()``, called between steps, drops to one thread while other processes
hold the cores and goes back when they leave.

The signal is the number of runnable tasks (``/proc/loadavg``'s fourth field, an instantaneous
count across all CPUs), less this thread, sampled at every tick; once an interval has passed
since the last decision, the median of the last interval's samples decides. Other work holds
the cores when that median is at least the core count (as the start-up rule reads the load
average); they are free again when the run's own threads fit beside it (at most the cores less
those threads: 0 others on 2 cores). Between the two, the count stays as it is, so a load that
hovers at the edge does not make a run flap. Between steps this process's other OpenMP threads
sleep (their spin, ``GOMP_SPINCOUNT=10000``, lasts microseconds), so they do not count
themselves. Where ``/proc/loadavg`` does not exist the governor does nothing.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable

from foldexp.startup import QUIET_THREADS

__all__ = ["ThreadGovernor", "runnable_others", "governor_for_run"]


def runnable_others(path: str = "/proc/loadavg") -> int | None:
    """Runnable tasks on the machine now, less the one reading; ``None`` where unknown."""
    try:
        with open(path, encoding="ascii") as f:
            running = f.read().split()[3].split("/")[0]
        return max(0, int(running) - 1)
    except (OSError, IndexError, ValueError):
        return None


class ThreadGovernor:
    """Runs ``threads`` intra-op threads while the cores are free, one while others hold them.

    Args:
        threads: the thread count for a quiet machine (the run's choice).
        cores: the machine's cores.
        interval_s: how often a decision is made (samples are taken at every ``tick``).
        sample, clock, set_threads: what reads the load, the time and sets torch's threads
            (replaceable in tests).
        current: the threads running now (default ``threads``).
    """

    def __init__(
        self,
        threads: int,
        cores: int,
        interval_s: float = 1.0,
        sample: Callable[[], int | None] = runnable_others,
        clock: Callable[[], float] = time.monotonic,
        set_threads: Callable[[int], None] | None = None,
        current: int | None = None,
    ) -> None:
        if set_threads is None:
            import torch

            set_threads = torch.set_num_threads
        self.threads, self.cores, self.interval_s = threads, cores, interval_s
        self._sample, self._clock, self._set_threads = sample, clock, set_threads
        self.current = threads if current is None else current
        self.switches = 0
        self._samples: list[tuple[float, int]] = []  # (time, runnable others)
        self._since = clock()

    @property
    def active(self) -> bool:
        """Whether there is a choice to make: more than one thread, and a load to read."""
        return self.threads > 1 and self._sample() is not None

    def tick(self) -> int | None:
        """Samples the load; at the end of an interval, switches if the median says so.
        Returns the new thread count after a switch, else ``None``."""
        if self.threads <= 1:
            return None
        others = self._sample()
        if others is None:
            return None
        now = self._clock()
        # Only the last interval's samples: after a pause (an evaluation) the old ones are stale.
        self._samples = [(t, n) for t, n in self._samples if now - t < self.interval_s]
        self._samples.append((now, others))
        if now - self._since < self.interval_s:
            return None
        median = statistics.median(n for _, n in self._samples)
        self._since = now
        if self.current > 1 and median >= self.cores:
            return self._switch(1)
        if self.current == 1 and median <= self.cores - self.threads:
            return self._switch(self.threads)
        return None

    def _switch(self, threads: int) -> int:
        self._set_threads(threads)
        self.current = threads
        self.switches += 1
        return threads


def governor_for_run(current: int) -> ThreadGovernor | None:
    """The governor of a run that chose its own threads and runs ``current`` now: the quiet
    count is the start-up rule's (at most the cores); ``None`` where there is nothing to govern
    (one core, no load reading)."""
    cores = os.cpu_count() or 1
    governor = ThreadGovernor(min(QUIET_THREADS, cores), cores, current=current)
    return governor if governor.active else None
