"""foldexp: dynamic batching for neural networks over trees, graphs and sequences.

``import foldexp.blocks as fb`` for the block library; ``from foldexp import Compiler`` to batch a
block graph over lists of Python inputs; ``foldexp.load_run(path)`` for a trained run's model,
config and ``predict(inputs)``.
"""

from foldexp.startup import configure_openmp

configure_openmp()  # before torch loads OpenMP: see foldexp/startup.py

from foldexp.executor.compiled import Compiler  # noqa: E402 -- after the OpenMP setting

__version__ = "0.1.0"
__all__ = ["Compiler", "__version__", "load_run"]


def __getattr__(name: str) -> object:
    """``foldexp.load_run`` (``foldexp/analysis/load_run.py``), imported on first use: the
    package's import stays the engine's alone, below the layers that read run folders."""
    if name == "load_run":
        import importlib

        return importlib.import_module("foldexp.analysis.load_run").load_run
    raise AttributeError(f"module 'foldexp' has no attribute {name!r}")
