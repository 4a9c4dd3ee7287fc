"""Launching foldexp's Triton kernels without Triton's per-call binding, once compiled.

``kernel[grid](*args, **flags)`` runs Triton's ``JITFunction.run`` every call: it binds the
arguments, reads its settings, asks the driver for the current device and stream, computes the
specialization key, looks the compiled kernel up and builds the launch metadata for hooks, all
in Python. On an H200's host that cost about 50 µs a launch in a profile of the peers' step (53
launches, 2.7 ms of an 18 ms step), where a torch op costs about 20 µs.

``launch`` keeps, per kernel, the ``CompiledKernel`` that call returned, under a key at least
as fine as Triton's specialization (each tensor's dtype and 16-byte alignment; each integer's
width, whether it is 1 and whether 16 divides it; the flags; the device), and calls its
launcher directly on the current stream. Triton's own call serves a key not seen yet (it
compiles or finds the kernel), Triton's interpreter (no compiled kernel there), a launch hook
(a profiler's), a Triton whose launcher this was not checked against (3.6 was), and the
switch off (``set_direct_launch_enabled``: benchmarks compare both in one process).
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["direct_launch_enabled", "launch", "set_direct_launch_enabled"]

_enabled = True
_KNOWN_LAUNCHERS = ("3.6.",)
# (kernel, key) -> the CompiledKernel Triton returned for that specialization
_compiled: dict[tuple[Any, tuple], Any] = {}


def direct_launch_enabled() -> bool:
    """Whether compiled kernels launch directly (see the module doc)."""
    return _enabled


def set_direct_launch_enabled(flag: bool) -> None:
    global _enabled
    _enabled = bool(flag)


def _arg_key(a: Any) -> Any:
    if isinstance(a, torch.Tensor):
        return a.dtype, a.data_ptr() % 16 == 0
    if isinstance(a, bool) or not isinstance(a, int):
        return a
    return -(2**31) <= a < 2**31, a == 1, a % 16 == 0


def _key(args: tuple, flags: dict[str, Any], device: torch.device) -> tuple:
    return device, tuple(_arg_key(a) for a in args), tuple(sorted(flags.items()))


def _direct_ready() -> bool:
    """Whether this Triton's launcher is the one ``_run`` calls (checked on 3.6; any other
    version takes Triton's own call) and no launch hook is set (a profiler's: Triton's call
    runs them)."""
    import triton
    from triton import knobs

    if not triton.__version__.startswith(_KNOWN_LAUNCHERS):
        return False
    hooks = (knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook)
    return not any(h is not None and getattr(h, "calls", True) for h in hooks)


def _run(compiled: Any, grid: tuple[int, ...], args: list[Any], device: torch.device) -> None:
    """Triton 3.6's ``CompiledKernel.run``: grid, stream, function, metadata, no launch
    metadata or hooks, then every parameter."""
    g = (*grid, 1, 1)
    stream = torch._C._cuda_getCurrentRawStream(device.index)
    compiled.run(g[0], g[1], g[2], stream, compiled.function, compiled.packed_metadata,
                 None, None, None, *args)  # fmt: skip


def launch(kernel: Any, grid: tuple[int, ...], *args: Any, **flags: Any) -> None:
    """``kernel[grid](*args, **flags)`` on the device of ``args[0]`` (a CUDA tensor, made
    current by the caller), directly where a compiled kernel for this specialization is kept."""
    global _enabled
    if not _enabled or not hasattr(kernel, "arg_names") or not args[0].is_cuda:
        kernel[grid](*args, **flags)  # the switch off, a stand-in, or Triton's interpreter
        return
    device = args[0].device
    key = (kernel, _key(args, flags, device))
    compiled = _compiled.get(key)
    if compiled is None or not _direct_ready():
        result = kernel[grid](*args, **flags)
        if getattr(result, "packed_metadata", None) is not None:
            _compiled[key] = result
        return
    # The launcher takes every parameter in order (constexprs too, which it ignores).
    ordered = [*args, *(flags[name] for name in kernel.arg_names[len(args) :])]
    try:
        _run(compiled, grid, ordered, device)
    except TypeError:  # a launcher of another shape: Triton's own call from now on
        _enabled = False
        kernel[grid](*args, **flags)
