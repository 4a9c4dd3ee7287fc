"""Executor: runs scheduled plans as a few large PyTorch calls per depth, with autograd."""

from foldexp.executor.compiled import Compiler, collect_ops
from foldexp.executor.run import execute

__all__ = ["Compiler", "collect_ops", "execute"]
