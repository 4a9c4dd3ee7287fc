"""Below the block layer: faster routes to standard ops (``linear``, ``dropout``), fused Tree-LSTM
state updates (``treelstm``), gradient rows added into a buffer (``scatter``; these three C++
built on first use by ``native``), a user's runs of pointwise ops as generated C++ kernels
(``pointwise_graph``, ``pointwise_regions``, ``pointwise_code``) and memory. The fused cells and
the generated kernels serve the CPU's per-group route (``device.compile=off``); under
``device.compile=inductor`` PyTorch's Inductor fuses every cell, ours and a user's alike
(``executor/tape.py``)."""

from foldexp.kernels.deferred import WeightGradients, collecting_weight_gradients
from foldexp.kernels.denormals import flush_denormals
from foldexp.kernels.dense import (
    MIN_ROWS,
    Linear,
    linear,
    onednn_available,
    onednn_enabled,
    padded_rows,
    routed_linears,
    set_onednn_enabled,
)
from foldexp.kernels.dropout_noise import Dropout, dropout
from foldexp.kernels.memory import keep_freed_memory
from foldexp.kernels.native import fused_cells_enabled, set_fused_cells_enabled
from foldexp.kernels.settings import configure_kernels

__all__ = [
    "Linear",
    "linear",
    "Dropout",
    "dropout",
    "onednn_available",
    "onednn_enabled",
    "set_onednn_enabled",
    "routed_linears",
    "padded_rows",
    "MIN_ROWS",
    "keep_freed_memory",
    "flush_denormals",
    "configure_kernels",
    "fused_cells_enabled",
    "set_fused_cells_enabled",
    "WeightGradients",
    "collecting_weight_gradients",
]
