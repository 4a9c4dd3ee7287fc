"""Keeping freed memory in the process, so big tensors stop page-faulting on every step.

Why: torch's CPU tensors come from ``malloc``. glibc serves a block of more than a few MB with a
fresh ``mmap`` and hands it back to the kernel on ``free``, so every training step touches its
largest tensors (a dynamic batch's value and gradient buffers: 67 MB each in Table 1) as new
pages: one page fault and one kernel page-zeroing per 4 KB, every step. ``keep_freed_memory``
tells glibc (``mallopt``) to serve every block from its heap and never to trim that heap, so a
step reuses the pages the previous step freed. Measured on the Fold paper's Table 1 training step
(batch 256, state 256, 2 threads; medians of 9, manual and engine alternating in one process):
manual batching 428 → 361 ms, the engine 505 → 389 ms. The price is that the process keeps its
peak heap until it exits (SST training's RSS is in the README).

Process-wide, so it is not done on import: the commands call it when ``device.keep_memory`` is
true (the default), before any work; library users may call it themselves. Only glibc has these
knobs; elsewhere it does nothing and says so.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform

__all__ = ["keep_freed_memory"]

# glibc's <malloc.h> parameter numbers
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4

_applied = False


def keep_freed_memory() -> bool:
    """Makes glibc keep freed memory for reuse; returns whether it did (False off glibc).

    Idempotent. Allocations that the heap cannot grow for still get an ``mmap`` (glibc's own
    fallback), so nothing fails that would have succeeded.
    """
    global _applied
    if _applied:
        return True
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # mallopt takes an int: the largest trim threshold it can express is 2**31 - 1 bytes, which
    # is still larger than any heap top this project leaves behind.
    ok = mallopt(_M_MMAP_MAX, 0) == 1 and mallopt(_M_TRIM_THRESHOLD, 2**31 - 1) == 1
    _applied = ok
    return ok
