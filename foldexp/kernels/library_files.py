"""The native libraries foldexp loads come only from files this process can vouch for.

Loading a shared library runs its code (constructors run inside ``dlopen``, before any ABI
check), so a file in the kernel cache is checked *before* it is loaded, never after:

- the cache folder is this user's and nobody else may write to it, and so is every folder above
  it (owned by this user or root, not writable by group or others unless sticky, like ``/tmp``);
- the library is opened with ``O_NOFOLLOW`` (a symbolic link is refused) and ``O_NONBLOCK`` (a
  FIFO never blocks), and ``fstat`` on that descriptor must show a regular file of this user's
  that group and others cannot write;
- its contents must match the sha256 recorded in ``<name>.sha256`` beside it (``sha256sum``
  format) when this user built it; the sidecar passes the same checks;
- it is then loaded through ``/proc/self/fd/N``: the descriptor that was checked, so nothing can
  be swapped in between. The descriptor stays open for the process's life (the library stays
  mapped anyway): ``dlopen`` knows a library by the name it was loaded under, and a number never
  reused is never mistaken for another library.

A file that fails any check is removed, with a warning naming it and why, and the caller builds
it again (``native.build_and_open``). Checks and builds hold an exclusive ``flock`` on the cache
folder's ``.lock``, so processes that build at once (DDP ranks, a sweep) never see one process's
library beside another's sidecar, and the first build serves the rest.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # not POSIX: no /proc/self/fd either, so nothing is loaded (``load_name``)
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "UnsafeFolder",
    "UntrustedLibrary",
    "cache_lock",
    "load_name",
    "private_dir",
    "record",
    "vouched",
]

log = logging.getLogger("foldexp.kernels")

SUFFIX = ".sha256"
_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_held: list[int] = []  # descriptors of loaded libraries (see the module docstring)


class UntrustedLibrary(RuntimeError):
    """A file in the kernel cache that this process cannot vouch for."""


class UnsafeFolder(RuntimeError):
    """A kernel cache folder that someone else could write to: nothing is built or loaded."""


def _uid() -> int | None:
    return os.getuid() if hasattr(os, "getuid") else None


def _chain_fault(path: Path) -> str | None:
    """Why a folder above ``path`` lets another user replace what is in it, else ``None``."""
    uid = _uid()
    # The folders as named and as resolved: a link's target, and the folder holding the link.
    for parent in dict.fromkeys([*path.absolute().parents, *path.resolve().parents]):
        st = os.stat(parent)
        if uid is not None and st.st_uid not in (uid, 0):
            return f"{parent} is owned by user {st.st_uid}"
        if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
            return f"{parent} is writable by others (mode {st.st_mode & 0o7777:o})"
    return None


def private_dir(path: Path) -> Path:
    """``path``, created if missing, refused unless this user owns it, nobody else may write to
    it and every folder above it is as safe: the libraries there are loaded into the process,
    so whoever can write them runs code."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = os.stat(path)
    uid = _uid()
    if not stat.S_ISDIR(st.st_mode) or (
        uid is not None and (st.st_uid != uid or st.st_mode & 0o022)
    ):
        raise UnsafeFolder(
            f"{path} is not a private folder of this user (owner {st.st_uid}, mode "
            f"{st.st_mode & 0o777:o}): set FOLDEXP_KERNEL_CACHE to one"
        )
    fault = _chain_fault(path)
    if fault is not None:
        raise UnsafeFolder(
            f"{path} is not a private folder of this user ({fault}): set FOLDEXP_KERNEL_CACHE "
            "to a folder only you can change"
        )
    return path


@contextlib.contextmanager
def cache_lock(folder: Path) -> Iterator[None]:
    """An exclusive lock on ``folder/.lock`` (see the module docstring)."""
    path = folder / ".lock"
    try:
        fd = _open_checked(path, create=True)
    except UntrustedLibrary as err:  # a FIFO, a link: replaced by a file of this user's
        _discard(path, str(err))
        fd = _open_checked(path, create=True)
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _open_checked(path: Path, create: bool = False) -> int:
    """``path`` opened without following a link or blocking, and ``fstat``-checked: a regular
    file of this user's that nobody else may write. Raises ``UntrustedLibrary`` saying why,
    ``FileNotFoundError`` when there is nothing at ``path``."""
    flags = _FLAGS | _CLOEXEC | ((os.O_CREAT | os.O_RDWR) if create else 0)
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise UntrustedLibrary("a symbolic link") from None
        if err.errno == errno.ENOENT:
            raise
        raise UntrustedLibrary(f"cannot be opened ({err.strerror})") from None
    st = os.fstat(fd)
    uid = _uid()
    fault = (
        "not a regular file" if not stat.S_ISREG(st.st_mode)
        else f"owned by user {st.st_uid}" if uid is not None and st.st_uid != uid
        else f"writable by others (mode {st.st_mode & 0o777:o})" if st.st_mode & 0o022
        else None
    )  # fmt: skip
    if fault is not None:
        os.close(fd)
        raise UntrustedLibrary(fault)
    os.set_blocking(fd, True)
    return fd


def _sha256(fd: int) -> str:
    digest = hashlib.sha256()
    os.lseek(fd, 0, os.SEEK_SET)
    while block := os.read(fd, 1 << 20):
        digest.update(block)
    return digest.hexdigest()


def _recorded(path: Path) -> str:
    """The digest ``path``'s sidecar records; raises ``UntrustedLibrary`` when there is none."""
    sidecar = path.with_name(path.name + SUFFIX)
    try:
        fd = _open_checked(sidecar)
    except FileNotFoundError:
        raise UntrustedLibrary(f"no {sidecar.name} recording its build") from None
    except UntrustedLibrary as err:
        raise UntrustedLibrary(f"its {sidecar.name} is {err}") from None
    try:
        text = os.read(fd, 4096).decode("ascii", "replace")
    finally:
        os.close(fd)
    return text.split(" ", 1)[0].strip()


def vouched(path: Path) -> int | None:
    """A descriptor of the library at ``path`` that passed every check (the caller loads it
    with ``load_name``); ``None`` when there is none, after removing whatever stood there with
    a warning naming it. Call it holding ``cache_lock``."""
    try:
        fd = _open_checked(path)
    except FileNotFoundError:
        return None
    except UntrustedLibrary as err:
        return _discard(path, str(err))
    try:
        recorded = _recorded(path)
        if _sha256(fd) != recorded:
            raise UntrustedLibrary("its contents do not match the digest recorded when built")
    except UntrustedLibrary as err:
        os.close(fd)
        return _discard(path, str(err))
    return fd


def _discard(path: Path, why: str) -> None:
    log.warning("%s is not a file this process can vouch for (%s): removed without loading "
                "it; building it again", path, why)  # fmt: skip
    for name in (path, path.with_name(path.name + SUFFIX)):
        with contextlib.suppress(FileNotFoundError):
            if name.is_dir() and not name.is_symlink():
                # A folder at the library's name would fail the rebuild's rename onto it;
                # rmtree unlinks the links inside it, never what they point to.
                shutil.rmtree(name)
            else:
                os.unlink(name)  # a link itself, a FIFO: never what they point to
    return None


def record(tmp: Path, target: Path) -> int:
    """Vouches for a freshly built library at ``tmp``: made readable only by this user, its
    digest written to ``target``'s sidecar (atomically), then renamed onto ``target``. Returns
    the checked descriptor to load it from. Call it holding ``cache_lock``."""
    os.chmod(tmp, 0o500)  # a umask of 002 must not leave it group-writable (refused above)
    fd = _open_checked(tmp)
    sidecar = target.with_name(target.name + SUFFIX)
    part = sidecar.with_name(f".{sidecar.name}.{os.getpid()}.tmp")
    try:
        out = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(out, "w", encoding="ascii") as f:
            f.write(f"{_sha256(fd)}  {target.name}\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(part, sidecar)
        os.replace(tmp, target)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(part)
        raise
    return fd


def load_name(fd: int) -> Path:
    """The name to hand ``dlopen`` for the checked descriptor ``fd``, which is kept open."""
    name = Path(f"/proc/self/fd/{fd}")
    if not name.exists():
        os.close(fd)
        raise RuntimeError("no /proc/self/fd: native code is loaded only from checked files")
    _held.append(fd)
    return name
