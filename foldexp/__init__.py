"""foldexp: dynamic batching for neural networks over trees, graphs and sequences.

``import foldexp.blocks as fb`` for the block library; ``from foldexp import Compiler`` to batch a
block graph over lists of Python inputs.
"""

import os
import sys

if "torch" not in sys.modules:
    # torch's OpenMP threads spin at each barrier before they sleep. When other processes hold
    # the cores, a spinning thread burns the time slice its descheduled partner needs, and a
    # 2-thread step took ~10x its quiet time (benchmarks/under_load.py). PASSIVE threads sleep
    # at once. It must be set before torch loads OpenMP; a user's own OMP_WAIT_POLICY wins.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from foldexp.executor.compiled import Compiler  # noqa: E402 -- after the OpenMP setting

__version__ = "0.1.0"
__all__ = ["Compiler", "__version__"]
