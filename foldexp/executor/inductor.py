"""Compiling a captured graph with Inductor (``device.compile=inductor``).

Inductor writes C++/OpenMP kernels on the CPU and Triton kernels on CUDA, and keeps what it
wrote in an on-disk cache that it loads from on a warm start. That cache is
``inductor_cache_dir()``: a folder of foldexp's own beside the kernel cache, created private
and checked by the kernel cache's rules before anything in it is loaded (this user's, nobody
else may write to it or to a folder above it), and every file in it likewise (no links, this
user's, writable by nobody else). A cache that fails a check is not used and nothing is
compiled: the graphs run as they are (``graphs``), said once in the log.

A warm start loads each graph from that cache, but Inductor still probes the CPU's vector
instruction sets in every process: it compiles a test and loads it in a child Python, about ten
times (seconds on two cores). A probe that succeeded is remembered in the cache folder, keyed by
the machine (CPU flags, compiler, torch, Python); one that failed is probed again next time.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import stat
import sys
import time
from pathlib import Path
from typing import Any

import torch

from foldexp.kernels.library_files import UnsafeFolder, private_dir
from foldexp.kernels.native import kernel_cache_dir

__all__ = ["compile_graph", "inductor_cache_dir", "remember_isa_probes"]

log = logging.getLogger(__name__)
_cache_ready: bool | None = None
PROBES = "vec_isa_probes.json"


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
        remember_isa_probes(path / PROBES)
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


def _machine_key() -> str:
    """What a probe's outcome depends on: the CPU's flags, the compiler, torch and Python."""
    from torch._inductor.cpp_builder import get_cpp_compiler

    flags = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            flags = next((line for line in f if line.startswith(("flags", "Features"))), "")
    except OSError:
        pass
    compiler = get_cpp_compiler()
    try:
        compiler_stamp = os.stat(compiler).st_mtime_ns
    except OSError:
        compiler_stamp = 0
    parts = [platform.machine(), flags, compiler, str(compiler_stamp), torch.__version__]
    return hashlib.sha256("\0".join([*parts, sys.executable]).encode()).hexdigest()


def _read_probes(path: Path, machine: str) -> set[str]:
    """The probes that succeeded on this machine; empty where the file is absent, another
    machine's, or not what we write."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set()
    ok = data.get("passed") if isinstance(data, dict) and data.get("machine") == machine else None
    return {k for k in ok if isinstance(k, str)} if isinstance(ok, list) else set()


def remember_isa_probes(path: Path) -> None:
    """Makes Inductor's CPU instruction-set probes (``VecISA.check_build``) remember their
    successes in ``path`` (a file in our private cache folder), so a warm start skips them.
    Nothing changes where this torch has no such probe."""
    try:
        from torch._inductor import cpu_vec_isa
    except ImportError:
        return
    probe = getattr(cpu_vec_isa.VecISA, "check_build", None)
    if probe is None or getattr(probe, "remembered", None) == path:
        return
    probe = getattr(probe, "original", probe)
    machine = _machine_key()
    passed = _read_probes(path, machine)

    def check_build(self: Any, code: str) -> bool:
        key = hashlib.sha256(f"{self.build_arch_flags()}\0{code}".encode()).hexdigest()
        if key in passed:
            return True
        ok = bool(probe(self, code))
        if ok:
            passed.add(key)
            _write_probes(path, machine, passed)
        return ok

    check_build.remembered = path  # type: ignore[attr-defined]
    check_build.original = probe  # type: ignore[attr-defined]
    cpu_vec_isa.VecISA.check_build = check_build


def _write_probes(path: Path, machine: str, passed: set[str]) -> None:
    """Writes the file whole or not at all; a failure only costs the next start its probes."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"machine": machine, "passed": sorted(passed)}, f)
        os.replace(tmp, path)
    except OSError as e:
        log.debug("Inductor's probe results not written: %s", e)
