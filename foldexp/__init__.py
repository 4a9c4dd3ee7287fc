"""foldexp: dynamic batching for neural networks over trees, graphs and sequences.

``import foldexp.blocks as fb`` for the block library; ``from foldexp import Compiler`` to batch a
block graph over lists of Python inputs.
"""

from foldexp.startup import configure_openmp

configure_openmp()  # before torch loads OpenMP: see foldexp/startup.py

from foldexp.executor.compiled import Compiler  # noqa: E402 -- after the OpenMP setting

__version__ = "0.1.0"
__all__ = ["Compiler", "__version__"]
