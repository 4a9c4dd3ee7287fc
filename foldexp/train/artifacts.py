"""Run-directory files: atomic writes, checksums, ``metrics.csv``, plots, ``results.json``.

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
import json
import logging
import os
import re
import stat
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pandas as pd

from foldexp.data.cells import spreadsheet_frame
from foldexp.data.jsonfile import read_json
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
    "plot_curves",
    "restorable",
    "read_verified_json",
    "trust_unverified",
    "verify_file",
    "write_json",
    "write_metrics_csv",
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
    try:
        accepted = _read_sidecar(path)
    except CorruptFileError as exc:
        return _unverified(path, f"cannot be verified ({exc})", advice)
    size = os.fstat(opened.fileno()).st_size if opened else path.stat().st_size
    if accepted is None:
        return _unverified(
            path,
            f"has no {checksum_path(path).name} sidecar: it cannot be verified (changed by "
            "someone, or written before foldexp stored checksums)",
            advice,
        )
    digest = _sha256(opened) if opened else file_sha256(path)
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
    """A JSON file's value after ``verify_file``; malformed JSON fails naming file and line."""
    verify_file(path, advice)
    return read_json(path)


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


def write_metrics_csv(path: str | os.PathLike[str], rows: list[dict[str, Any]]) -> Path:
    """One row per epoch, columns in first-seen order (with a ``.sha256`` sidecar)."""
    return atomic_write(
        path,
        lambda tmp: spreadsheet_frame(pd.DataFrame(rows)).to_csv(tmp, index=False),
        checksum=True,
    )


def plot_curves(
    csv_path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    title: str | None = None,
    best_epoch: int | None = None,
    tasks: Sequence[str] = (),
    units: Sequence[str] | None = None,
) -> list[Path]:
    """Draws ``loss.png`` and ``<metric>.png`` from a ``metrics.csv`` (redrawable any time).

    Each plot is titled with the run (``title``, default: the run folder's name; the training
    loop's names the data file and the model) and marks ``best_epoch``, the checkpoint kept;
    losses go on a log axis, where late epochs' small differences stay visible. Epochs are
    whole numbers on the axis. ``tasks``: the targets' metric suffixes of a run over several
    targets; their per-target metrics (``dev_roc_auc_NR_AR``) make one figure of small
    multiples, ``per_task.png``, not a file each. ``units``: each target's units, written on
    the RMSE and MAE axes.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from foldexp.train.task_table import per_task_keys

    df = pd.read_csv(csv_path)
    out_dir = Path(out_dir)
    title = title or out_dir.resolve().name
    per_task = per_task_keys(list(df.columns), tasks)
    common = units[0] if units and len(set(units)) == 1 else None
    written = []
    metrics = sorted(
        {
            c.split("_", 1)[1]
            for c in df.columns
            if c.startswith(("train_", "dev_")) and "_" in c and c not in per_task
        }
    )
    for metric in metrics:
        cols = [c for c in (f"train_{metric}", f"dev_{metric}") if c in df.columns]
        if not cols or df[cols].isna().all().all():
            continue
        fig, ax = plt.subplots(figsize=(5, 3.5))
        _curves(ax, df, cols, best_epoch, metric, common)
        ax.set_title(title, fontsize=9)
        ax.legend()
        written.append(_save_figure(plt, fig, out_dir / f"{metric}.png"))
    if per_task:
        written.append(_small_multiples(plt, df, tasks, units, title, best_epoch, out_dir))
    return written


def _curves(
    ax: Any, df: pd.DataFrame, cols: list[str], best: int | None, metric: str, unit: str | None
) -> None:
    """Train and dev curves of one metric on ``ax``: whole epochs, one label per axis."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator, NullFormatter

    for c in cols:
        ax.plot(df["epoch"], df[c], marker="o", label=c.split("_", 1)[0])
    if best is not None and best >= 0:
        ax.axvline(best, color="grey", linestyle="--", label=f"best (epoch {best})")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # no epoch 0.5
    if metric == "loss" and (df[cols] > 0).all().all():
        ax.set_yscale("log")
        # plain numbers on the major ticks only: a log axis within one decade labelled its
        # minor ticks too, in another notation (0.6 beside 6×10⁻¹)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.3g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        low, high = df[cols].min().min(), df[cols].max().max()
        if high / low < 10:  # no decade inside: a few plain ticks across the data
            ax.set_yticks(np.geomspace(low, high, 4))
    ax.set_xlabel("epoch")
    is_error = metric.split("_", 1)[0] in ("rmse", "mae")
    ax.set_ylabel(f"{metric} ({unit})" if unit and is_error else metric)
    ax.grid(alpha=0.3)


def _small_multiples(
    plt: Any,
    df: pd.DataFrame,
    tasks: Sequence[str],
    units: Sequence[str] | None,
    title: str,
    best: int | None,
    out_dir: Path,
) -> Path:
    """``per_task.png``: one panel per target of its first per-target metric (ROC AUC for
    classification, RMSE for regression), train and dev."""
    base = next(
        m for m in ("roc_auc", "rmse", "prc_auc", "mae") if f"dev_{m}_{tasks[0]}" in df.columns
    )
    width = min(4, len(tasks))
    height = -(-len(tasks) // width)
    fig, axes = plt.subplots(
        height, width, figsize=(3 * width, 2.4 * height), squeeze=False, sharex=True
    )
    for k, (ax, suffix) in enumerate(zip(axes.flat, tasks, strict=False)):
        cols = [c for c in (f"train_{base}_{suffix}", f"dev_{base}_{suffix}") if c in df.columns]
        unit = units[k] if units else None
        _curves(ax, df, cols, best, base, unit)
        ax.set_title(suffix, fontsize=9)
        ax.set_xlabel("")
    for ax in list(axes.flat)[len(tasks) :]:
        ax.set_visible(False)
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(f"{title}: {base} per target", fontsize=10)
    fig.supxlabel("epoch", fontsize=9)
    return _save_figure(plt, fig, out_dir / "per_task.png")


def _save_figure(plt: Any, fig: Any, path: Path) -> Path:
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=100))
    plt.close(fig)
    return path
