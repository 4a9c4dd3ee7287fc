"""Run-directory files: atomic writes, checksums, ``results.json``.

Every file is written to a temporary name in the same folder and renamed into place, so a run
killed at any moment leaves either the old file or the new one, never half of one. The temporary
name carries the writer's PID (``.<name>.<pid>.<random>.tmp``) so that a later run can tell a
dead writer's leftovers from a live one's (``rundir.clean_stale_tmp``). Files are created with
the permissions the user's umask gives (``0o666 & ~umask``), not ``mkstemp``'s private 0600, so
others on a shared machine can read results as they can any other file of the user's.

Checksums. Checkpoints and result files (``write_json``, ``write_metrics_csv``,
``checkpoint.save_checkpoint``) get a sidecar ``<name>.sha256`` in ``sha256sum`` format, so
``sha256sum -c results.json.sha256`` checks one by hand. The sidecar is written *before* the
file is renamed into place and also records the hash of the version it replaces (a ``#``
comment line, which ``sha256sum -c`` skips): a kill between the two renames leaves the previous,
intact version, which still verifies. ``verify_file(path)`` and ``read_verified_json(path)``
check a file against its sidecar and raise ``CorruptFileError`` naming the file, what is wrong
and what to do. A file with no sidecar, or one that does not match it, is refused the same
way: deleting ``best.pt.sha256`` must not be a way past the check. Accepting such a file is the
user's explicit choice (``trust_unverified``: ``--trust-unverified`` on the commands that read
run folders, ``trainer.trust_unverified=true`` for a resume or a teacher); it is then read with a
logged warning, which is how a run from before foldexp stored checksums stays usable.

A full disk. Each file reaches the disk (``fsync``) before it is renamed into place; a write the
disk refuses (``ENOSPC``, ``EDQUOT``, ``EIO``, ``EFBIG``) leaves the file as it was and raises
``WriteFailedError``, one line naming the file, the space free there and the space it needs,
which ``foldexp train`` prints with status 2. ``restorable`` puts a file's previous version back
when writes that must follow it fail (``best.pt`` before its epoch's ``last.pt``).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import logging
import os
import re
import stat
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, BinaryIO

from foldexp.data.jsonfile import parse_json
from foldexp.train.write_errors import WriteFailedError, write_failed

__all__ = [
    "CHECKSUM_SUFFIX",
    "CorruptFileError",
    "WriteFailedError",
    "atomic_write",
    "checksum_path",
    "file_mode",
    "file_sha256",
    "open_regular",
    "restorable",
    "read_verified_json",
    "trust_unverified",
    "verify_file",
    "write_json",
    "write_text",
]

log = logging.getLogger("foldexp.train")

CHECKSUM_SUFFIX = ".sha256"
_PREVIOUS = "# previous version, still valid after a kill between the two renames: "
_HEX = re.compile(r"^[0-9a-f]{64}$")


class CorruptFileError(ValueError):
    """A file that is damaged, truncated, changed since it was written, or not what it should
    be. The message names the file, what is wrong and what to do."""


# ---------------------------------------------------------------------- accepting knowingly

# (accepted, how the user accepts): set by the command that reads, so the refusal names the
# switch of that command (a CLI flag, a config key), and a library caller refuses by default.
_TRUST: ContextVar[tuple[bool, str]] = ContextVar(
    "foldexp_trust_unverified", default=(False, "--trust-unverified")
)


@contextmanager
def trust_unverified(accept: bool, how: str) -> Iterator[None]:
    """Within the block, a file without its sidecar or unlike it is read with a warning when
    ``accept`` (else refused); ``how`` is the switch the refusal tells the user to set."""
    token = _TRUST.set((bool(accept), how))
    try:
        yield
    finally:
        _TRUST.reset(token)


def _unverified(path: Path, what: str, advice: str) -> bool:
    """``False`` with a warning when the user accepted unverified files, else the refusal."""
    accept, how = _TRUST.get()
    if accept:
        log.warning("%s %s: read unverified (%s)", path, what, how)
        return False
    raise CorruptFileError(
        f"{path} {what}; it is refused"
        + (f". {advice}" if advice else "")
        + f"; or, if you know where it comes from, accept it as it is with {how}"
    )


# ---------------------------------------------------------------------- permissions


def _umask() -> int:
    """The process umask, read without changing it where /proc allows."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # the only portable way to read it is to set it and put it back
    os.umask(mask)
    return mask


def file_mode() -> int:
    """The mode ``open()`` would give a new file: ``0o666`` less the umask."""
    return 0o666 & ~_umask()


# ---------------------------------------------------------------------- checksums


def checksum_path(path: str | os.PathLike[str]) -> Path:
    """``<name>.sha256`` beside ``path``."""
    path = Path(path)
    return path.with_name(path.name + CHECKSUM_SUFFIX)


def file_sha256(path: str | os.PathLike[str]) -> str:
    with open(path, "rb") as f:
        return _sha256(f)


def _sha256(f: BinaryIO) -> str:
    """The sha256 of ``f``'s contents from its start; ``f`` is left at its start again."""
    digest = hashlib.sha256()
    f.seek(0)
    for block in iter(lambda: f.read(1 << 20), b""):
        digest.update(block)
    f.seek(0)
    return digest.hexdigest()


def _read_sidecar(path: Path) -> list[str] | None:
    """The hashes ``path``'s sidecar accepts (current first); ``None`` when it has none."""
    sidecar = checksum_path(path)
    try:
        text = _read_small(sidecar).decode("ascii")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise CorruptFileError(f"{sidecar}: unreadable checksum file ({exc})") from None
    lines = text.splitlines()
    hashes = [lines[0].split(" ", 1)[0]] if lines else []
    hashes += [ln[len(_PREVIOUS) :].strip() for ln in lines[1:] if ln.startswith(_PREVIOUS)]
    if not hashes or not all(_HEX.match(h) for h in hashes):
        raise CorruptFileError(f"{sidecar}: not a sha256 checksum file; {path} cannot be checked")
    return hashes


_SIDECAR_BYTES = 4096  # two sha256sum lines, with room for a long file name


def _read_small(path: Path) -> bytes:
    """A sidecar's bytes, read as an untrusted file may need: a FIFO put at its name must not
    block (opened non-blocking), nor a link to ``/dev/zero`` fill the memory (a regular file
    only, of at most ``_SIDECAR_BYTES``)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        data = os.read(fd, _SIDECAR_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > _SIDECAR_BYTES:
        raise OSError(errno.EFBIG, f"larger than {_SIDECAR_BYTES} bytes")
    return data


def _previous_hash(path: Path) -> list[str]:
    """The hash of the version of ``path`` about to be replaced, if that version is intact."""
    if not path.is_file():
        return []
    digest = file_sha256(path)
    try:
        accepted = _read_sidecar(path)
    except CorruptFileError:
        return []
    return [digest] if accepted is None or digest in accepted else []


def _write_sidecar(path: Path, digest: str, previous: list[str]) -> None:
    text = f"{digest}  {path.name}\n" + "".join(f"{_PREVIOUS}{h}\n" for h in previous)
    atomic_write(checksum_path(path), lambda tmp: Path(tmp).write_text(text, encoding="ascii"))


def verify_file(
    path: str | os.PathLike[str], advice: str = "", opened: BinaryIO | None = None
) -> bool:
    """Checks ``path`` against its ``.sha256`` sidecar; with ``opened`` (``path`` open for
    reading), the contents checked are that handle's, which the caller then reads: a file
    swapped in between cannot be read unchecked (``open_regular`` opens it).

    Returns ``True`` when it matches. Raises ``FileNotFoundError`` for a missing file and
    ``CorruptFileError`` for a file without a sidecar, or an empty or changed one, its message
    naming the file, ending with ``advice`` (what the caller's user should do) and the way to
    accept it knowingly (``trust_unverified``); accepted, it returns ``False`` with a warning.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")

    def measure() -> tuple[str, int]:
        size = os.fstat(opened.fileno()).st_size if opened else path.stat().st_size
        return (_sha256(opened) if opened else file_sha256(path)), size

    return _check_sidecar(path, advice, measure)


def _check_sidecar(path: Path, advice: str, measure: Callable[[], tuple[str, int]]) -> bool:
    """``verify_file``'s check of the contents ``measure`` hashes (their sha256 and size)
    against ``path``'s sidecar; ``measure`` runs only once the sidecar has been read."""
    try:
        accepted = _read_sidecar(path)
    except CorruptFileError as exc:
        return _unverified(path, f"cannot be verified ({exc})", advice)
    if accepted is None:
        return _unverified(
            path,
            f"has no {checksum_path(path).name} sidecar: it cannot be verified (changed by "
            "someone, or written before foldexp stored checksums)",
            advice,
        )
    digest, size = measure()
    if digest not in accepted:
        what = "is empty (0 bytes)" if size == 0 else f"does not match its checksum ({size} bytes)"
        return _unverified(
            path,
            f"{what}: sha256 {digest[:16]}…, {checksum_path(path).name} records "
            f"{accepted[0][:16]}…; the file was damaged or changed after it was written",
            advice,
        )
    return True


def open_regular(path: Path) -> BinaryIO:
    """``path`` opened for reading as it is now: never blocking on a FIFO put at its name,
    and refused (``FileNotFoundError``) unless it is a regular file."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise FileNotFoundError(f"{path}: no such file")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_verified_json(path: str | os.PathLike[str], advice: str = "") -> Any:
    """A JSON file's value after ``verify_file``'s check; malformed JSON fails naming file and
    line. The file is read once: the bytes checked are the bytes parsed, so a file swapped in
    between cannot be read unchecked."""
    path = Path(path)
    try:
        with open_regular(path) as f:
            data = f.read()
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such file") from None
    _check_sidecar(path, advice, lambda: (_sha256(io.BytesIO(data)), len(data)))
    return parse_json(data, path)


# ---------------------------------------------------------------------- writing


def atomic_write(
    path: str | os.PathLike[str], write: Callable[[str], None], checksum: bool = False
) -> Path:
    """Calls ``write(tmp_path)`` then renames the temporary file onto ``path``; with
    ``checksum``, first records the new contents' sha256 in ``<name>.sha256``. The contents
    reach the disk (``fsync``) before the rename; a write the disk refuses (full, over quota, an
    I/O error) raises ``WriteFailedError`` naming ``path`` and the space, ``path`` untouched."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(
        prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent
    )
    os.close(fd)
    try:
        write(tmp)
        _fsync(tmp)  # a disk that fills up after write() returned says so here, not later
        os.chmod(tmp, file_mode())  # mkstemp's 0600 would hide results from the user's group
        if checksum:
            _write_sidecar(path, file_sha256(tmp), _previous_hash(path))
        os.replace(tmp, path)
    except OSError as exc:
        failed = write_failed(path, tmp, exc)
        _unlink(tmp)
        if failed is None:
            raise
        raise failed from None
    except BaseException:
        _unlink(tmp)
        raise
    return path


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


@contextlib.contextmanager
def restorable(path: Path) -> Iterator[Callable[[], None]]:
    """For writes that must succeed together: yields ``keep``, which (called before ``path``
    is replaced) keeps its current version and sidecar as hard links (no space needed). If the
    block then fails, that version is put back (or the new file removed where there was none),
    so a file never stays newer than the writes that should have followed it."""
    kept: list[tuple[Path, Path | None]] = []

    def keep() -> None:
        for p in () if kept else (path, checksum_path(path)):
            link: Path | None = p.with_name(f".{p.name}.{os.getpid()}.keep.tmp")
            try:
                os.link(p, link)
            except FileNotFoundError:
                link = None
            except OSError as exc:  # a file system without hard links: no way back
                log.warning("cannot keep %s's previous version (%s)", p, exc)
                return
            kept.append((p, link))

    try:
        yield keep
    except BaseException:
        for p, link in kept:
            if link is None:
                p.unlink(missing_ok=True)
            else:
                os.replace(link, p)
        raise
    finally:
        for _, link in kept:
            if link is not None:
                link.unlink(missing_ok=True)


def write_text(path: str | os.PathLike[str], text: str, checksum: bool = False) -> Path:
    return atomic_write(
        path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"), checksum=checksum
    )


def write_json(path: str | os.PathLike[str], data: Any, checksum: bool = True) -> Path:
    """A result file: JSON, atomically, with a ``.sha256`` sidecar."""
    text = json.dumps(data, indent=2, sort_keys=True, default=str) + "\n"
    return write_text(path, text, checksum=checksum)
