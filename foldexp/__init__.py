"""foldexp: dynamic batching for neural networks over trees, graphs and sequences.

``import foldexp.blocks as fb`` for the block library; ``from foldexp import Compiler`` to batch a
block graph over lists of Python inputs.
"""

import os
import sys

_OPENMP_WAIT = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
if "torch" not in sys.modules and not any(v in os.environ for v in _OPENMP_WAIT):
    # torch's OpenMP threads spin 300,000 turns at each barrier before they sleep. When other
    # processes hold the cores, a spinning thread burns the time slice its descheduled partner
    # needs: a 2-thread step took 8.7x its quiet time beside 4 busy processes on 2 cores
    # (benchmarks/under_load.py). A short spin (10,000) cost 2% when quiet and halved that; on a
    # machine already busy at start, threads sleep at once (PASSIVE: 3.1x under load, but 1.4x
    # slower when quiet). Read by OpenMP when torch loads it; a user's own setting wins.
    if os.getloadavg()[0] >= (os.cpu_count() or 1):
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    else:
        os.environ["GOMP_SPINCOUNT"] = "10000"

from foldexp.executor.compiled import Compiler  # noqa: E402 -- after the OpenMP setting

__version__ = "0.1.0"
__all__ = ["Compiler", "__version__"]
