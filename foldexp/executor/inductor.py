"""Compiling a captured graph with Inductor (``device.compile=inductor``).

Inductor writes C++/OpenMP kernels on the CPU and Triton kernels on CUDA, and keeps what it
wrote in an on-disk cache that it loads from on a warm start. That cache is
``inductor_cache_dir()``: a folder of foldexp's own beside the kernel cache, created private
and checked by the kernel cache's rules before anything in it is loaded (this user's, nobody
else may write to it or to a folder above it), and every file in it likewise (no links, this
user's, writable by nobody else). A cache that fails a check is not used and nothing is
compiled: the graphs run as they are (``graphs``), said once in the log.
"""

from __future__ import annotations

import logging
import os
import stat
import time
from pathlib import Path
from typing import Any

import torch

from foldexp.kernels.library_files import UnsafeFolder, private_dir
from foldexp.kernels.native import kernel_cache_dir

__all__ = ["compile_graph", "inductor_cache_dir"]

log = logging.getLogger(__name__)
_cache_ready: bool | None = None


def inductor_cache_dir() -> Path:
    """Where Inductor's on-disk cache lives: ``inductor/`` beside foldexp's kernel cache."""
    return kernel_cache_dir().parent / "inductor"


def _unsafe_file(folder: Path) -> str | None:
    """The first file under ``folder`` that is not a regular file of this user's that nobody
    else may write (or a link), with why; ``None`` where all are."""
    uid = os.getuid() if hasattr(os, "getuid") else None
    for root, dirs, files in os.walk(folder):
        for name in [*dirs, *files]:
            st = os.lstat(os.path.join(root, name))
            if stat.S_ISLNK(st.st_mode):
                return f"{os.path.join(root, name)} is a link"
            if (uid is not None and st.st_uid != uid) or st.st_mode & 0o022:
                return f"{os.path.join(root, name)} is not this user's alone"
    return None


def _prepare_cache() -> bool:
    """Points Inductor at our private cache folder once; ``False`` where it fails the checks
    (the graphs then run as they are)."""
    global _cache_ready
    if _cache_ready is None:
        path = inductor_cache_dir()
        try:
            private_dir(path)
            fault = _unsafe_file(path)
        except (OSError, UnsafeFolder) as e:
            fault = str(e)
        if fault is not None:
            log.warning("Inductor's cache is not used, graphs run as they are: %s", fault)
            _cache_ready = False
            return False
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(path)
        _cache_ready = True
    return _cache_ready


def compile_graph(gm: torch.fx.GraphModule, example: list[Any], backward: bool) -> Any:
    """``gm`` compiled by Inductor for inputs like ``example`` (fakes, sizes symbolic where
    they are), as a function of positional arguments; ``gm.forward`` where the cache folder
    is unsafe."""
    if not _prepare_cache():
        return gm.forward
    from torch._inductor import config
    from torch._inductor.compile_fx import compile_fx_inner

    start = time.perf_counter()
    # Its inputs are the tape's own: row blocks of its buffers and the op's parameters, laid
    # out as at the capture every time. Checking each one's sizes and strides at every call
    # was a third of a small graph's call. Random numbers (dropout) come from torch's own
    # generator, as the graphs run as they are draw them: Inductor's own stream is set up by
    # passes over the joint graph, which the tape's separate graphs do not go through.
    # Inductor's graph cache (a warm start's saving) keys symbolic sizes by the tracer's shape
    # environment, which it finds in a tracing context: without one it compiles every time.
    context = torch._guards.TracingContext(torch._guards.detect_fake_mode(example))
    with config.patch(size_asserts=False, fallback_random=True), torch._guards.tracing(context):
        compiled = compile_fx_inner(gm, example, is_backward=backward)
    log.info("Inductor compiled a %s graph of %d nodes in %.1f s", "backward" if backward
             else "forward", len(gm.graph.nodes), time.perf_counter() - start)  # fmt: skip

    call = [compiled]

    def run(*args: Any) -> Any:
        out = call[0](list(args))
        # After its first call (where Inductor finishes its bookkeeping, autotuning's cache
        # among it) the compiled code itself, without the wrapper's per-call context managers.
        call[0] = getattr(compiled, "current_callable", None) or compiled
        return out

    return run
