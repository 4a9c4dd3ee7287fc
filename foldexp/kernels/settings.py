"""The ``device.*`` kernel switches of a process, applied in one call.

``foldexp train``, ``foldexp bench`` and the bench's peer workers each configure their process
from the same three settings: the oneDNN route for dense layers (``dense.py``), foldexp's C++
kernels (``native.py``: fused cells, dropout noise) and flushing denormal floats
(``denormals.py``). The allocator setting (``memory.py``) stays apart: a peer worker sets it
before torch is imported.
"""

from __future__ import annotations

from foldexp.kernels.denormals import flush_denormals
from foldexp.kernels.dense import set_onednn_enabled
from foldexp.kernels.native import set_fused_cells_enabled

__all__ = ["configure_kernels"]


def configure_kernels(onednn: bool | None, fused_cells: bool | None, flush_denormal: bool) -> bool:
    """Applies the three switches (``None``: foldexp's choice for this machine); returns whether
    the CPU has the flush-to-zero mode that ``flush_denormal`` asks for.

    Raises:
        RuntimeError: ``fused_cells=True`` where the fused kernels cannot be built.
    """
    set_onednn_enabled(onednn)
    set_fused_cells_enabled(fused_cells)
    return flush_denormals(flush_denormal)
