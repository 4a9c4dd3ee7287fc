"""Numerical kernels below the block layer: faster routes to standard ops (``linear``)."""

from foldexp.kernels.dense import (
    MIN_ROWS,
    Linear,
    linear,
    onednn_enabled,
    padded_rows,
    set_onednn_enabled,
)

__all__ = ["Linear", "linear", "onednn_enabled", "set_onednn_enabled", "padded_rows", "MIN_ROWS"]
