"""Denormal floats flushed to zero on every thread torch computes on (``device.flush_denormal``).

Why: an x86 core takes a slow path, tens of times slower, for every operation that reads or
makes a denormal float (below 1.2e-38 in float32). Weight decay shrinks the rows of a word table
that a batch does not read a little at every step until, after an epoch or two, they are
denormal: SST's sequence LSTM (``experiment=sst_lstm``: Adagrad, weight decay 1e-4 on an
18,281-word table, 1 thread) had 8.5% of the table denormal after 40 steps, and its step took
32.6 ms (optimizer 5.2 ms) against 22.9 ms (1.2 ms) with them flushed. TensorFlow flushes them
by default; torch does not.

What changes: a denormal input reads as 0 and a denormal result is written as 0, so a value
that small is lost: it is 1e-38 below the float32 rounding of any quantity a model computes
with. ``device.flush_denormal=false`` keeps IEEE behaviour. The mode is the process's: a
program that calls ``run_train`` keeps it afterwards, as it keeps torch's thread count.

``torch.set_flush_denormal`` sets the flags of its calling thread only; torch's OpenMP worker
threads keep theirs (threads started later copy their creator's). The native library
(``native.py``) sets them on each thread of the current OpenMP team as well; where it cannot be
built, the workers already running keep IEEE denormals.
"""

from __future__ import annotations

import torch

from foldexp.kernels.native import load_kernels

__all__ = ["flush_denormals"]


def flush_denormals(on: bool) -> bool:
    """Flushes denormals to zero (``on``) or restores IEEE denormals on this thread and torch's
    OpenMP threads; ``False`` where the CPU has no such mode."""
    supported = torch.set_flush_denormal(on)
    lib = load_kernels() if supported else None
    if lib is not None:
        lib.foldexp_set_flush_denormal(int(on))
    return supported
