"""Which aten ops make the host wait for a CUDA device, told from the op and its arguments, so
that a step's syncs can be counted on a CPU (``overhead.count_ops``; ``where_syncs`` names the
lines).

A read of a device value (``.item()``, ``bool(t)``, ``int(t)``, ``.tolist()``) dispatches
``aten._local_scalar_dense``. Others read a size the host needs to allocate their output and
sync inside their CUDA kernel, which on a CPU is one op with no read to see: ``nonzero`` (and
``torch.where(cond)``), indexing by a boolean mask (``x[mask]``, ``x[mask] = y``),
``masked_select``, ``torch.unique``, a sparse tensor's ``coalesce``, ``repeat_interleave``
without ``output_size``, ``bincount`` (its length is the largest value) and ``equal``.
"""

from __future__ import annotations

import traceback
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["syncs_on_device", "where_syncs"]

_ALWAYS = {
    "aten._local_scalar_dense.default",
    "aten.nonzero.default",
    "aten.argwhere.default",
    "aten.masked_select.default",
    "aten._unique.default",
    "aten._unique2.default",
    "aten.unique_dim.default",
    "aten.unique_consecutive.default",
    "aten.unique_dim_consecutive.default",
    "aten._coalesce.default",
    "aten.bincount.default",
    "aten.equal.default",
}
_MASK_INDEXING = {
    "aten.index.Tensor",
    "aten.index_put.default",
    "aten.index_put_.default",
    "aten._index_put_impl_.default",
}
_MASK_DTYPES = (torch.bool, torch.uint8)


def syncs_on_device(func: Any, args: Any, kwargs: Any) -> bool:
    """Whether ``func(*args, **kwargs)`` makes the host wait for the device on CUDA."""
    name = str(func)
    if name in _ALWAYS:
        return True
    if name in _MASK_INDEXING:
        indices = args[1] if len(args) > 1 else (kwargs or {}).get("indices", ())
        return any(isinstance(i, torch.Tensor) and i.dtype in _MASK_DTYPES for i in indices)
    if name == "aten.repeat_interleave.Tensor" or name == "aten.repeat_interleave.self_Tensor":
        return (kwargs or {}).get("output_size") is None
    return False


class _Where(TorchDispatchMode):
    def __init__(self, sink: Counter, keep: Callable[[str], bool]) -> None:
        super().__init__()
        self.sink, self.keep = sink, keep

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if syncs_on_device(func, args, kwargs):
            frames = [f for f in traceback.extract_stack()[:-1] if self.keep(f.filename)]
            lines = [f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in frames[-3:]]
            self.sink[f"{str(func).removeprefix('aten.')} at {' < '.join(reversed(lines))}"] += 1
        return func(*args, **(kwargs or {}))


def where_syncs(fn: Callable[[], Any]) -> Counter:
    """Runs ``fn()`` once; each op that would sync on CUDA, with the innermost lines that
    called it (outside Python's and the installed packages' files, torch's optimizers and
    ``nn.utils`` excepted), and how often."""

    def keep(filename: str) -> bool:
        if "torch/optim" in filename or "torch/nn/utils" in filename:
            return True
        return filename != __file__ and "/lib/python" not in filename

    sink: Counter = Counter()
    with _Where(sink, keep):
        fn()
    return sink
