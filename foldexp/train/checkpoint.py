"""Checkpoints and resuming: model, optimizer, position and every RNG, saved atomically, loaded
safely, on one process or several.

``last.pt`` is rewritten at every epoch end (and every ``checkpoint_every`` steps); ``best.pt`` when
the selection metric improves. Each has a ``.sha256`` sidecar (``artifacts.py``) and, for
``trainer.resume``, the run's resolved config (``resume_config.py`` compares it).
``read_checkpoint`` verifies the checksum, then loads with ``torch.load(weights_only=True)``:
checkpoints hold only tensors and plain Python containers, never pickled objects. Whatever goes
wrong (a changed or truncated file, a pickle a weights-only load refuses, a payload without its
parts) raises ``CorruptFileError`` naming the file and what to do; it never suggests
``weights_only=False``, since a run folder may come from anyone. What loads is then checked
before any of it is used (``checkpoint_checks.py``): plain tensors only, on every read; the
position, the RNG states and the states' shapes before a resume or ``best.pt`` puts them back.

A single process saves and loads the payload as it is (``save_run``, ``restore_run``). Under
DDP rank 0 alone writes, but the payload carries every rank's RNG state (``rank_rng``) so each
rank's dropout stream continues where it stopped; on restore rank 0 reads the file and
broadcasts it, so the other ranks need no shared file system. Whether a checkpoint may be
resumed under the current config is ``resume_config.py``: a concept of its own (which keys
may change), and together the two would pass 400 lines.
"""

from __future__ import annotations

import pickle
import random
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from foldexp.train import distributed as dd
from foldexp.train.artifacts import CorruptFileError, atomic_write, open_regular, verify_file
from foldexp.train.checkpoint_checks import (
    ProgressLimits,
    check_progress,
    check_rng,
    check_state_fits,
    check_tensors,
)
from foldexp.train.optim import load_optimizer_state
from foldexp.train.resume_config import refuse_changes

__all__ = [
    "LAST_ADVICE",
    "CorruptFileError",
    "ProgressLimits",
    "check_resume",
    "load_best",
    "restore_run",
    "save_run",
    "seed_rank",
    "save_checkpoint",
    "load_checkpoint",
    "load_payload",
    "read_checkpoint",
    "rng_state",
    "set_rng_state",
    "seed_everything",
]


LAST_ADVICE = (
    "Restore it from a backup; or copy checkpoints/best.pt and best.pt.sha256 over last.pt and "
    "last.pt.sha256 to go on from the best epoch; or start afresh in this folder with "
    "trainer.resume=false trainer.overwrite=true"
)

_NEED = ("model", "optimizer", "progress", "rng")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state() -> dict[str, Any]:
    """Python, numpy and torch RNG states in weights-only-loadable form."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": [kind, torch.from_numpy(np.asarray(keys, dtype=np.int64)), pos, has_gauss, cached],
        "torch": torch.get_rng_state(),
    }
    # Only where this process has used CUDA: a CPU run's GPU generators are untouched, and
    # asking for them would start a CUDA context on every GPU of the machine.
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        # A run resumed on a machine with fewer GPUs (or read on one without: nothing to set)
        # restores the generators of the devices it has.
        for index, generator in enumerate(state["cuda"][: torch.cuda.device_count()]):
            torch.cuda.set_rng_state(generator, index)


def save_checkpoint(
    path: Path,
    model: torch.nn.Module,
    optimizer: Any,
    progress: dict[str, Any],
    states: dict[str, Any] | None = None,
    config: dict[str, Any] | None = None,
) -> Path:
    """Writes model, optimizer, training position and RNG states to ``path`` atomically, with
    a ``.sha256`` sidecar; ``states``: more named objects with ``state_dict()`` (e.g. the
    parameter average); ``config``: the run's resolved config, plain values only."""
    payload = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "progress": progress,
        "rng": rng_state(),
        **{name: obj.state_dict() for name, obj in (states or {}).items()},
    }
    if config is not None:
        payload["config"] = config
    return atomic_write(path, lambda tmp: _save(payload, tmp), checksum=True)


def _save(payload: dict[str, Any], path: str) -> None:
    # Through a Python file: a full disk is then an OSError naming its errno (torch.save given
    # a path raises "unexpected pos 704 vs 598" instead).
    with open(path, "wb") as f:
        torch.save(payload, f)


_GLOBAL = re.compile(r"Unsupported global: GLOBAL ([\w.]+)")
_UNPICKLER = re.compile(r"WeightsUnpickler error:\s*(Unsupported operand \d+)")
# What torch's weights-only unpickler says when it meets an object it will not build; any other
# failure (``Unsupported operand 91``, an IndexError, a KeyError) means the bytes are not a
# checkpoint at all, and saying "it holds Python objects" would send the user the wrong way.
_REFUSED = re.compile(r"GLOBAL|Can only (create new object|build)|reduce for unrecognized")


def _unreadable(path: Path, exc: BaseException, advice: str) -> CorruptFileError:
    """The error for a file ``torch.load(weights_only=True)`` failed on, in our words: torch's
    own advice for refused pickles (load with ``weights_only=False``) must never reach a user
    who may be holding someone else's file."""
    end = f". {advice}" if advice else ""
    if isinstance(exc, pickle.UnpicklingError) and _REFUSED.search(str(exc)):
        found = _GLOBAL.search(str(exc))
        what = f"the Python object {found.group(1)}" if found else "Python objects"
        return CorruptFileError(
            f"{path} holds {what}, not only tensors and plain containers: it was not written by "
            f"foldexp and is not loaded (foldexp never unpickles a run folder's files){end}"
        )
    size = path.stat().st_size if path.exists() else 0
    if size == 0:
        return CorruptFileError(f"{path} is empty (0 bytes): not a checkpoint{end}")
    return CorruptFileError(
        f"{path} is truncated or damaged ({size} bytes): not a readable checkpoint "
        f"({_detail(exc)}){end}"
    )


def _detail(exc: BaseException) -> str:
    """A short cause for a damaged file's message, without torch's ``weights_only`` advice."""
    unpickler = _UNPICKLER.search(str(exc))
    if unpickler:  # e.g. "Unsupported operand 91": the bytes are not a pickle torch writes
        return unpickler.group(1)
    detail = str(exc).split(". ")[0].splitlines()[0] if str(exc) else ""
    if not detail or "weights_only" in detail or "Weights only" in detail:
        return type(exc).__name__
    if isinstance(exc, (LookupError, TypeError, AttributeError)):  # "101" alone says nothing
        return f"{type(exc).__name__}: {detail}"
    return detail


def read_checkpoint(
    path: str | Path, advice: str = "", need: Iterable[str] = ("model",)
) -> dict[str, Any]:
    """A checkpoint's payload, verified against its checksum and loaded weights-only; fails with
    ``CorruptFileError`` (message ending with ``advice``) if it is damaged or lacks a ``need``
    entry."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    try:
        # One opening: the bytes verified are the bytes loaded, whatever is renamed onto path
        with open_regular(path) as f:
            verify_file(path, advice, f)
            payload = torch.load(f, map_location="cpu", weights_only=True)
    except (PermissionError, IsADirectoryError, FileNotFoundError, CorruptFileError):
        raise  # the file is fine, access is not
    except MemoryError:
        raise  # the machine's limits, not the file's
    except Exception as exc:  # noqa: BLE001 - the unpickler fails on damage with any error
        raise _unreadable(path, exc, advice) from None
    missing = [k for k in need if not isinstance(payload, dict) or k not in payload]
    if missing:
        raise CorruptFileError(
            f"{path} is not a foldexp checkpoint: it has no {', '.join(missing)}"
            + (f". {advice}" if advice else "")
        )
    check_tensors(path, payload)  # plain tensors only, before anything is sized from them
    return payload


def load_payload(
    path: Path,
    payload: dict[str, Any],
    model: torch.nn.Module,
    optimizer: Any = None,
    states: dict[str, Any] | None = None,
) -> None:
    """Puts a loaded checkpoint's model, optimizer and ``states`` back, once each is checked
    to fit what it is copied into (``check_state_fits``)."""
    check_state_fits(path, payload, model, optimizer, states)
    model.load_state_dict(payload["model"])
    if optimizer is not None:
        load_optimizer_state(optimizer, payload["optimizer"])
    for name, obj in (states or {}).items():
        if name not in payload:
            raise ValueError(
                f"{path} has no {name!r} state: it was written by a run configured without it"
            )
        obj.load_state_dict(payload[name])


def load_checkpoint(
    path: Path,
    model: torch.nn.Module,
    optimizer: Any = None,
    restore_rng: bool = True,
    states: dict[str, Any] | None = None,
    advice: str = "",
) -> dict[str, Any]:
    """Restores what ``save_checkpoint`` wrote; returns the saved training position."""
    need = ["model", "progress"] + (["optimizer"] if optimizer is not None else [])
    payload = read_checkpoint(path, advice, need + (["rng"] if restore_rng else []))
    if restore_rng:
        check_rng(path, payload["rng"])
    load_payload(path, payload, model, optimizer, states)
    if restore_rng:
        set_rng_state(payload["rng"])
    return payload["progress"]


# ---------------------------------------------------------------------- a run's checkpoints


def check_resume(path: Path, config: Mapping[str, Any]) -> None:
    """Refuses (``ResumeConfigError``) to resume ``path`` under a config that changes what it
    trains, or (``CorruptFileError``) a damaged checkpoint; nothing when ``path`` is absent.
    ``config``: the new run's plain config (``RunSettings.plain_config``)."""
    if path.exists():
        payload = read_checkpoint(path, LAST_ADVICE, _NEED)
        check_progress(path, payload["progress"])
        check_rng(path, payload["rng"])
        refuse_changes(path, payload.get("config"), dict(config))


def save_run(
    ctx: dd.DistContext,
    path: Path,
    model: torch.nn.Module,
    optimizer: Any,
    progress: dict[str, Any],
    states: dict[str, Any],
    config: dict[str, Any] | None = None,
) -> None:
    """Writes ``path`` atomically; under DDP every rank must call it (the RNGs are gathered)."""
    if not ctx.enabled:
        save_checkpoint(path, model, optimizer, progress, states, config)
        return
    rngs = dd.all_gather(ctx, rng_state())
    if ctx.is_main:
        save_checkpoint(path, model, optimizer, {**progress, "rank_rng": rngs}, states, config)


def _read_on_main(ctx: dd.DistContext, path: Path) -> dict[str, Any] | None:
    """Rank 0 reads ``path`` and every rank gets the payload, or the same error."""
    payload: Any = None
    if ctx.is_main and path.exists():
        try:
            payload = read_checkpoint(path, LAST_ADVICE, _NEED)
        except CorruptFileError as exc:
            payload = exc
    payload = dd.broadcast(ctx, payload)
    if isinstance(payload, Exception):
        raise payload
    return payload


def restore_run(
    ctx: dd.DistContext,
    path: Path,
    model: torch.nn.Module,
    optimizer: Any,
    states: dict[str, Any],
    config: dict[str, Any] | None = None,
    limits: ProgressLimits | None = None,
) -> dict[str, Any] | None:
    """Loads ``path`` (model, optimizer, RNGs) if it exists; returns the saved progress.

    With ``config``, first refuses a checkpoint whose run was configured otherwise
    (``ResumeConfigError``); every part is checked before any is used (``checkpoint_checks``:
    the position, against ``limits`` if given, the RNG states, the states' shapes). Each rank
    takes back its own RNG state; after a checkpoint from another number of processes the ranks
    above 0 keep their fresh seeds.
    """
    payload = _read_on_main(ctx, path)
    if payload is None:
        return None
    if config is not None:
        refuse_changes(path, payload.get("config"), config)
    check_progress(path, payload["progress"], limits)
    check_rng(path, payload["rng"])
    load_payload(path, payload, model, optimizer, states)
    progress = payload["progress"]
    rngs = progress.pop("rank_rng", None)
    if not ctx.enabled:
        set_rng_state(payload["rng"])
    elif rngs and len(rngs) == ctx.world_size:
        set_rng_state(rngs[ctx.rank])
    elif not ctx.rank:
        set_rng_state(payload["rng"])
    return progress


def seed_rank(seed: int, rank: int) -> None:
    """Each rank its own dropout masks; rank 0 keeps the single-process stream."""
    seed_everything(int(np.random.SeedSequence([seed, rank]).generate_state(1)[0]))


def load_best(ctx: dd.DistContext, path: Path, model: torch.nn.Module) -> None:
    """Loads the weights of ``path`` (``best.pt``) into ``model``; under DDP rank 0 reads the
    file and every rank gets its weights."""
    if not ctx.enabled:
        load_checkpoint(path, model, restore_rng=False)
        return
    best = read_checkpoint(path)["model"] if ctx.is_main else None
    best = dd.broadcast(ctx, best)
    check_state_fits(path, {"model": best}, model)  # on every rank: they raise together
    model.load_state_dict(best)
