"""foldexp: dynamic batching for neural networks over trees, graphs and sequences.

``import foldexp.blocks as fb`` for the block library; ``from foldexp import Compiler`` to batch a
block graph over lists of Python inputs.
"""

from foldexp.executor.compiled import Compiler

__version__ = "0.1.0"
__all__ = ["Compiler", "__version__"]
