"""Executor: runs scheduled plans as a few large PyTorch calls per depth, with autograd."""

from foldexp.executor.capture import (
    COMPILE_MODES,
    compile_mode,
    compiling,
    default_compile_mode,
    resolve_compile_mode,
    set_compile_mode,
)
from foldexp.executor.compiled import Compiler, collect_ops
from foldexp.executor.run import execute

__all__ = [
    "COMPILE_MODES",
    "Compiler",
    "collect_ops",
    "compile_mode",
    "compiling",
    "default_compile_mode",
    "execute",
    "resolve_compile_mode",
    "set_compile_mode",
]
