"""Issue 39, rows 1-3: nothing runs from the kernel cache that this process cannot vouch for.

A harmless shared library whose constructor writes a marker file is planted where foldexp's
kernels, its native tracing and a user's pointwise ops are cached (over the file, as a link to
a world-writable file of another user's, with mode 666, beside a sidecar that does not match,
as a FIFO, as a folder). A fresh process (its cache a private folder of the test's, never the
user's) loads them: the marker must never appear, a warning names each planted file, the
kernels work after the rebuild, and the FIFO does not block.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from foldexp.kernels import native

pytestmark = pytest.mark.skipif(
    native._compiler() is None or not Path("/proc/self/fd").exists(),
    reason="needs a C++ compiler and /proc/self/fd",
)

EVIL = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void planted(void) {
    const char *path = getenv("FOLDEXP_TEST_MARKER");
    FILE *f = path ? fopen(path, "w") : NULL;
    if (f) { fputs("the planted library's constructor ran\n", f); fclose(f); }
}
int foldexp_kernels_abi(void) { return -1; }
"""

LOAD = """
import logging, sys, torch
logging.basicConfig(format="%(levelname)s %(message)s")
from foldexp.kernels import native, treelstm
from foldexp.compiler import native_trace
assert native.load_kernels() is not None, native.build_failure()
assert native_trace.native_tracing_available()
z, cl, cr = torch.randn(4, 40), torch.randn(4, 8), torch.randn(4, 8)
assert treelstm.fused_cells_enabled()
for a, b in zip(treelstm.binary_state(z, cl, cr), treelstm.binary_state_ops(z, cl, cr)):
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
from foldexp.kernels.pointwise_code import Const, Instr, Leaf, Region, RegionCall, run_in_torch
region = Region(width=8, source_widths=(8,), leaves=(Leaf(0, 0),), outputs=(2,),
                instrs=(Instr("sigmoid", (0,)), Instr("mul", (Const(2.0), 1))))
call = RegionCall(region)  # a user's pointwise ops: a library of its own
assert call.kernel is not None
x = torch.randn(5, 8)
torch.testing.assert_close(call(x)[0], run_in_torch(region, [x])[0])
print("KERNELS OK")
"""


def _load(cache: Path, marker: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "FOLDEXP_KERNEL_CACHE": str(cache), "FOLDEXP_TEST_MARKER": str(marker)}
    return subprocess.run(
        [sys.executable, "-c", LOAD], env=env, capture_output=True, text=True, timeout=240
    )


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache holding both libraries, built by a process of its own."""
    cache = tmp_path_factory.mktemp("built") / "cache"
    done = _load(cache, cache.parent / "unused")
    assert done.returncode == 0, done.stderr
    return cache


@pytest.fixture(scope="module")
def evil(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("evil")
    (folder / "evil.c").write_text(EVIL)
    out = folder / "evil.so"
    cc = native._compiler()
    subprocess.run([cc, "-shared", "-fPIC", "-o", out, folder / "evil.c"], check=True)
    return out


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _sidecar(lib: Path) -> Path:
    return lib.with_name(lib.name + ".sha256")


def _plant(how: str, lib: Path, evil: Path, outside: Path) -> None:
    """Puts ``evil`` (or a FIFO) where ``lib`` was, as ``how`` says."""
    lib.unlink()
    if how == "copied":  # the sidecar stays: it records the real library's digest
        shutil.copy(evil, lib)
    elif how == "no_sidecar":
        shutil.copy(evil, lib)
        _sidecar(lib).unlink()
    elif how == "mode_666":  # its own sidecar matches: only the mode gives it away
        shutil.copy(evil, lib)
        lib.chmod(0o666)
        _sidecar(lib).write_text(f"{_digest(evil)}  {lib.name}\n")
    elif how == "link_to_world_writable":
        target = outside / lib.name
        shutil.copy(evil, target)
        target.chmod(0o666)
        if os.getuid() == 0:
            os.chown(target, 65534, 65534)  # another user's file
        lib.symlink_to(target)
        _sidecar(lib).write_text(f"{_digest(evil)}  {lib.name}\n")
    elif how == "sidecar_a_link":
        shutil.copy(evil, lib)
        fake = outside / (lib.name + ".sha256")
        fake.write_text(f"{_digest(evil)}  {lib.name}\n")
        _sidecar(lib).unlink()
        _sidecar(lib).symlink_to(fake)
    elif how == "fifo":
        os.mkfifo(lib)
    elif how == "directory":  # a folder at the library's name, holding a file and a link
        lib.mkdir()
        shutil.copy(evil, lib / "inside.so")
        (lib / "out").symlink_to(outside)
    else:
        raise AssertionError(how)


HOW = [
    "copied",
    "no_sidecar",
    "mode_666",
    "link_to_world_writable",
    "sidecar_a_link",
    "fifo",
    "directory",
]


@pytest.mark.parametrize("how", HOW)
def test_a_planted_library_never_runs(how: str, built: Path, evil: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    shutil.copytree(built, cache, symlinks=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    libs = sorted(cache.glob("*.so"))
    assert {p.name.split("-")[0] for p in libs} == {
        "foldexp_kernels",
        "foldexp_native_trace",
        "pointwise",
    }
    for lib in libs:
        _plant(how, lib, evil, outside)
    marker = tmp_path / "constructor-ran"
    done = _load(cache, marker)  # a FIFO that blocked would hit the timeout
    assert not marker.exists(), "the planted library was loaded"
    assert done.returncode == 0, done.stderr
    assert "KERNELS OK" in done.stdout
    for lib in libs:
        assert f"WARNING {lib} is not a file this process can vouch for" in done.stderr
        assert lib.is_file() and not lib.is_symlink()  # rebuilt, and vouched for again
        assert _sidecar(lib).read_text().split()[0] == _digest(lib)
    assert _digest(outside / libs[0].name) == _digest(evil) if how.startswith("link") else True
    assert outside.is_dir()  # a link inside a planted folder: removed, not what it points to


def test_a_vouched_cache_loads_without_a_warning(built: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    shutil.copytree(built, cache, symlinks=True)
    before = {p.name: p.stat().st_mtime_ns for p in cache.glob("*.so")}
    done = _load(cache, tmp_path / "marker")
    assert done.returncode == 0 and "WARNING" not in done.stderr, done.stderr
    assert {p.name: p.stat().st_mtime_ns for p in cache.glob("*.so")} == before  # not rebuilt


def test_a_folder_above_the_cache_that_others_can_write_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # not sticky: anyone could rename the cache folder away
    try:
        with pytest.raises(RuntimeError, match=f"{shared} is writable by others"):
            native.private_dir(shared / "mine" / "kernels")
    finally:
        shared.chmod(0o700)
