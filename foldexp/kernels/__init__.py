"""Below the block layer: faster routes to standard ops (``linear``) and to memory."""

from foldexp.kernels.dense import (
    MIN_ROWS,
    Linear,
    linear,
    onednn_enabled,
    padded_rows,
    set_onednn_enabled,
)
from foldexp.kernels.memory import keep_freed_memory

__all__ = [
    "Linear",
    "linear",
    "onednn_enabled",
    "set_onednn_enabled",
    "padded_rows",
    "MIN_ROWS",
    "keep_freed_memory",
]
