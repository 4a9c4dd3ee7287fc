"""Builds foldexp's C++ kernels on first use and loads them with ctypes: the fused Tree-LSTM
state updates (``fused_cells.cpp``, used by ``treelstm.py``), dropout noise
(``dropout_noise.cpp``, used by ``dropout_noise.py``) and gradient rows added into a buffer
(``scatter_rows.cpp``, used by ``scatter.py``), one library; ``fast_math.h`` holds the exp,
sigmoid and tanh it shares with the kernels generated for a user's pointwise ops
(``pointwise_code.py``, one small library per region, built through ``build_and_open``).
A cached library is loaded only after it passed ``library_files``'s checks (a regular file of
this user's, in private folders, its contents the digest recorded when it was built); anything
else at its name is removed, with a warning naming it, and built again.

The sources are compiled for the machine it runs on (``-march=native``, OpenMP), with no torch
headers and no Python binding, in about a second, and the library is kept in a cache folder:
``$FOLDEXP_KERNEL_CACHE``, else ``$XDG_CACHE_HOME/foldexp/kernels``, else
``~/.cache/foldexp/kernels``. Its file name carries a digest of the source, the flags, the
compiler's version and this CPU's model and feature flags, so a cache shared between machines
(a cluster's home folder) never hands one CPU a library built for another. The library is written
to a temporary file and renamed into place, under a lock on the folder, so processes that build at
once (DDP ranks, a sweep) never load a half-written file.

Where no compiler works (``$CXX``, else ``g++``, ``c++``, ``clang++``), ``load_kernels()``
returns ``None`` and ``build_failure()`` says why; the callers then run plain torch ops.
``build_and_open`` builds and caches the same way for other native code (the compiler's
tracing, ``compiler/native_trace.py``), which follows this library's switch.

torch is imported before the library is loaded: the library's ``libgomp.so.1`` is then torch's,
so its loops run on torch's OpenMP threads and follow ``torch.set_num_threads``.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import torch  # (loaded first: see the module docstring)
from torch.autograd import forward_ad

from foldexp.kernels import library_files
from foldexp.kernels.library_files import private_dir

__all__ = [
    "load_kernels",
    "build_failure",
    "build_and_open",
    "cpu_fields",
    "cpu_vendor_family",
    "native_code_allowed",
    "kernel_cache_dir",
    "private_dir",
    "transforms_active",
    "set_fused_cells_enabled",
    "fused_cells_enabled",
]

log = logging.getLogger(__name__)
T = TypeVar("T")

SOURCES = tuple(
    Path(__file__).with_name(n)
    for n in ("fused_cells.cpp", "dropout_noise.cpp", "scatter_rows.cpp")
)
HEADER = Path(__file__).with_name("fast_math.h")  # included by fused_cells.cpp
FLAGS = ("-O3", "-march=native", "-fopenmp", "-fPIC", "-shared", "-fno-math-errno",
         "-fno-trapping-math")  # fmt: skip
ABI = 6  # fused_cells.cpp's foldexp_kernels_abi(); raise both when a signature changes
BUILD_TIMEOUT_S = 300

_P, _N = ctypes.c_void_p, ctypes.c_int64
_SIGNATURES = {
    "binary_forward": [_N, _N, _P, _P, _P, _P, _P, _P],
    "binary_backward": [_N, _N, _P, _P, _P, _P, _P, _P, _P, _P, _P],
    "leaf_forward": [_N, _N, _P, _P, _P, _P, _P],
    "leaf_backward": [_N, _N, _P, _P, _P, _P, _P, _P, _P],
    "dropout_noise": [_N, ctypes.c_double, _P, _P],
    "scatter_add_rows": [_N, _N, _N, _P, _N, _P, _P, _P],
}
_RETURNS = {"dropout_noise": ctypes.c_int, "scatter_add_rows": ctypes.c_int}

_lock = threading.Lock()
_loaded: ctypes.CDLL | None = None
_failure: str | None = None
_tried = False


def kernel_cache_dir() -> Path:
    if os.environ.get("FOLDEXP_KERNEL_CACHE"):
        return Path(os.environ["FOLDEXP_KERNEL_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "foldexp" / "kernels"


def _compiler() -> str | None:
    for name in (os.environ.get("CXX"), "g++", "c++", "clang++"):
        if name and shutil.which(name):
            return name
    return None


def _cpu_identity() -> str:
    """This CPU's model and feature flags (Linux), else what ``platform`` knows."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return f"{platform.machine()} {platform.processor()}"
    keep = [line for line in text.splitlines() if line.split(":")[0].strip() in
            ("model name", "flags", "Features", "CPU part")]  # fmt: skip
    return "\n".join(sorted(set(keep)))


def cpu_fields(cpuinfo: str = "/proc/cpuinfo") -> dict[str, str]:
    """The first processor's fields in ``cpuinfo`` (``vendor_id``, ``cpu family``, ``model
    name``, ...); empty where it cannot be read."""
    fields: dict[str, str] = {}
    try:
        with open(cpuinfo, encoding="ascii", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if not key:
                    if fields:  # the first processor's block ends
                        break
                    continue
                fields.setdefault(key, value.strip())
    except OSError:
        pass
    return fields


def cpu_vendor_family(cpuinfo: str = "/proc/cpuinfo") -> tuple[str, int]:
    """The first CPU's vendor id (``GenuineIntel``, ``AuthenticAMD``, ...) and family number,
    from ``cpuinfo``; ``("", 0)`` where unknown."""
    fields = cpu_fields(cpuinfo)
    family = fields.get("cpu family", "")
    return fields.get("vendor_id", ""), int(family) if family.isdigit() else 0


@functools.cache
def _compiler_version(compiler: str) -> str:
    """``compiler --version``, asked once a process: every library's path names it, and each
    of a user's generated kernels looks its library up (1.7 ms a subprocess)."""
    return subprocess.run(
        [compiler, "--version"], capture_output=True, text=True, timeout=30, check=True
    ).stdout


def _library_path(
    compiler: str, stem: str, sources: Sequence[Path], flags: Sequence[str], identity: str
) -> Path:
    version = _compiler_version(compiler)
    digest = hashlib.sha256()
    for part in (*(s.read_bytes() for s in sources), " ".join(flags).encode(),
                 version.encode(), _cpu_identity().encode(), identity.encode()):  # fmt: skip
        digest.update(part)
        digest.update(b"\0")
    return kernel_cache_dir() / f"{stem}-{digest.hexdigest()[:20]}.so"


def _build(compiler: str, target: Path, sources: Sequence[Path], flags: Sequence[str]) -> int:
    """Compiles to a temporary file, records its digest and renames it into place (see
    ``library_files``); returns the checked descriptor to load it from."""
    fd, tmp = tempfile.mkstemp(prefix=target.stem + ".", suffix=".tmp.so", dir=target.parent)
    os.close(fd)
    try:
        done = subprocess.run(
            [compiler, *flags, "-o", tmp, *map(str, sources)],
            capture_output=True, text=True, timeout=BUILD_TIMEOUT_S,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"{compiler} failed: {done.stderr.strip()[-600:]}")
        return library_files.record(Path(tmp), target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _open(path: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path))
    lib.foldexp_kernels_abi.restype = ctypes.c_int
    if lib.foldexp_kernels_abi() != ABI:
        raise RuntimeError(f"{path} has another ABI than {ABI}")
    for name, args in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, _RETURNS.get(name)
    lib.foldexp_set_flush_denormal.argtypes = [ctypes.c_int]
    lib.foldexp_set_flush_denormal.restype = ctypes.c_int
    return lib


def build_and_open(
    stem: str,
    sources: Sequence[Path],
    flags: Sequence[str],
    opener: Callable[[Path], T],
    identity: str = "",
) -> T:
    """The library built from ``sources`` with ``flags``, from the cache when it is there (see
    the module docstring), opened with ``opener``; ``identity``: more that the build depends on
    (headers), in the cached file's digest. Raises where no compiler works."""
    compiler = _compiler()
    if compiler is None:
        raise RuntimeError("no C++ compiler found ($CXX, g++, c++, clang++)")
    path = _library_path(compiler, stem, sources, flags, identity)
    private_dir(path.parent)
    with library_files.cache_lock(path.parent):  # (one build serves processes that wait)
        fd = library_files.vouched(path)
        if fd is None:
            fd = _build(compiler, path, sources, flags)
    return opener(library_files.load_name(fd))


def _kernels_path(compiler: str) -> Path:
    return _library_path(compiler, "foldexp_kernels", SOURCES, FLAGS, HEADER.read_text())


def _load() -> ctypes.CDLL:
    return build_and_open("foldexp_kernels", SOURCES, FLAGS, _open, HEADER.read_text())


def load_kernels() -> ctypes.CDLL | None:
    """The native library, built on first call; ``None`` where it cannot be built."""
    global _loaded, _failure, _tried
    if _tried:
        return _loaded
    with _lock:
        if not _tried:
            try:
                _loaded = _load()
            except Exception as err:  # noqa: BLE001  (any failure: torch ops serve instead)
                _failure = f"{type(err).__name__}: {err}"
                # A folder others could write is the user's to fix: said louder than a missing
                # compiler, which is a machine's normal state.
                level = (
                    logging.WARNING if isinstance(err, library_files.UnsafeFolder) else logging.INFO
                )
                log.log(level, "foldexp's C++ kernels unavailable, using torch ops: %s", _failure)
            _tried = True
    return _loaded


def _after_fork_in_child() -> None:
    # A fork taken while another thread held the lock (building) would leave the child's copy
    # held forever; the child gets a free lock, and builds itself if the build had not finished.
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def build_failure() -> str | None:
    """Why ``load_kernels()`` returned ``None`` (after it was called), else ``None``."""
    return _failure


def transforms_active() -> bool:
    """A tracer, ``torch.compile``, ``torch.func`` transform or forward-mode AD level is active: a
    kernel would hand them raw pointers or values they cannot follow, so torch ops run instead."""
    return (
        torch.compiler.is_compiling()
        or torch.jit.is_tracing()
        or torch.jit.is_scripting()
        or torch._C._are_functorch_transforms_active()
        or forward_ad._current_level >= 0
    )


_switch: bool | None = None


def set_fused_cells_enabled(flag: bool | None) -> None:
    """The switch for every kernel of this library and the generated ones (``device.fused_cells``,
    named after the first): ``None``: used where the library builds; ``True``: required (raises
    if it cannot be built); ``False``: torch ops everywhere."""
    global _switch
    if flag and load_kernels() is None:
        raise RuntimeError(
            f"device.fused_cells=true, but foldexp's C++ kernels could not be built: "
            f"{build_failure()}; set device.fused_cells=null to fall back to torch ops"
        )
    _switch = flag


def fused_cells_enabled() -> bool:
    return _switch is not False and load_kernels() is not None


def native_code_allowed() -> bool:
    """The switch is not off: foldexp's C++ code (these kernels, native tracing) may serve."""
    return _switch is not False
