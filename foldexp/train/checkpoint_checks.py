"""What a checkpoint holds, checked before any of it is used: a run folder may come from anyone.

A weights-only load builds nothing but tensors and plain containers, yet those can still lie.
A tensor ``expand()``ed to stride 0 claims terabytes over a few bytes of storage, and the model
a config builds to fit it would allocate them; a crafted Adam ``exp_avg`` of another shape
crashes torch's fused kernel; a progress record at epoch −5, at batch 10**18, or a history row
``=cmd|calc!A0`` trains nonsense or copies the text into ``metrics.csv``; a broken RNG state
fails deep inside numpy. Each check here raises ``CorruptFileError`` in one line naming the file
and the field, before the field reaches torch, numpy or the run:

* ``check_tensors``: every tensor of the payload plain (strided, dense, not overlapping, its
  storage exactly its elements) — ``checkpoint.read_checkpoint`` calls it on every load;
* ``check_progress``: the position's types and ranges, and with ``ProgressLimits`` its
  consistency with the run's config (epochs, batches per epoch);
* ``check_rng``: each generator's state, tried on a scratch generator of its kind;
* ``check_state_fits``: the model's, the parameter average's and the optimizer's state against
  the tensors they will be copied into (names, shapes, dtypes kinds; the optimizer's groups
  and per-parameter state in ``optimizer_checks``).
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from foldexp.train.artifacts import CorruptFileError

__all__ = [
    "ProgressLimits",
    "check_progress",
    "check_rng",
    "check_state_fits",
    "check_tensors",
]

# A progress record's integer fields and the smallest value each may take.
_COUNTS = {"epoch": 0, "batch": 0, "step": 0, "best_epoch": -1, "bad_epochs": 0, "epoch_n": 0}
_MAX_STOPPED = 1000  # characters of the reason a run stopped
# A history column's name: ``epoch``, ``train_loss``, ``dev_roc_auc_NR-AR``... A name starting
# with ``=``, ``+``, ``-`` or ``@`` would be a formula in ``metrics.csv``'s header.
_COLUMN = re.compile(r"[A-Za-z_][^\x00-\x1f\x7f]{0,199}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _refuse(path: Path, field: str, what: str) -> CorruptFileError:
    return CorruptFileError(
        f"{path}: {field} {what}; not a checkpoint foldexp writes (was the file crafted or edited?)"
    )


def _walk(value: Any, name: str, depth: int = 0) -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor in a payload of dicts, lists and tuples, with its dotted name."""
    if depth > 32:  # a checkpoint nests a few levels; deeper is built to exhaust the stack
        raise ValueError(f"{name} nests deeper than 32 levels")
    if isinstance(value, torch.Tensor):
        yield name, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):  # an optimizer's state, by parameter number
                yield from _walk(item, f"{name}[{key!r:.20}]", depth + 1)
            else:
                yield from _walk(item, f"{name}.{key}" if name else key, depth + 1)
    elif isinstance(value, (list, tuple)):
        for k, item in enumerate(value):
            yield from _walk(item, f"{name}[{k}]", depth + 1)


def _layout_problem(t: torch.Tensor) -> str | None:
    """Why ``t`` is not a plain tensor (dense, not overlapping, its storage exactly its
    elements), or ``None``."""
    if t.is_meta:  # torch fails copying out of one, with a multi-screen traceback
        return "is a meta tensor: it holds no values"
    if t.is_quantized or t.is_complex():  # refused by the copy, or cast losing half of it
        return f"is {t.dtype}, not a type foldexp saves"
    if t.layout != torch.strided:
        return f"has layout {t.layout}, not strided"
    if t.storage_offset() != 0:
        return f"starts at offset {t.storage_offset()} of its storage"
    expected = 1
    for size, stride in sorted(zip(t.shape, t.stride()), key=lambda ss: ss[1]):
        if size == 1:
            continue
        if stride != expected:
            kind = "stride 0 (an expanded view)" if stride == 0 else f"stride {stride}"
            return f"has shape {list(t.shape)} with {kind}: its elements overlap or leave gaps"
        expected *= size
    nbytes = t.untyped_storage().nbytes()
    if nbytes != t.numel() * t.element_size():
        return (
            f"has shape {list(t.shape)} ({t.numel()} elements) over a storage of {nbytes} "
            f"bytes, not {t.numel() * t.element_size()}"
        )
    return None


def check_tensors(path: Path, payload: Any) -> None:
    """Refuses a payload holding any tensor that is not plain (``_layout_problem``): what
    would be built to fit its shape must be backed by the bytes in the file."""
    try:
        for name, tensor in _walk(payload, ""):
            problem = _layout_problem(tensor)
            if problem:
                raise _refuse(path, name, problem)
    except ValueError as exc:
        if isinstance(exc, CorruptFileError):
            raise
        raise _refuse(path, "the payload", str(exc)) from None


# ---------------------------------------------------------------------- the position


@dataclass(frozen=True)
class ProgressLimits:
    """What the run's config allows a resumed position: ``epochs`` (``trainer.epochs``) and
    ``batches`` per epoch (the training set in ``trainer.batch_size`` batches, at most
    ``trainer.limit_batches``)."""

    epochs: int
    batches: int

    @classmethod
    def of(cls, epochs: int, examples: int, batch_size: int, limit: int = 0) -> ProgressLimits:
        batches = -(-examples // batch_size)
        return cls(int(epochs), min(batches, limit) if limit else batches)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_history(path: Path, history: Any) -> None:
    """History rows: mappings of column names (``_COLUMN``) to numbers (what ``metrics.csv`` is
    made of)."""
    if not isinstance(history, list):
        raise _refuse(path, "progress.history", f"is a {type(history).__name__}, not a list")
    for k, row in enumerate(history):
        if not isinstance(row, dict):
            raise _refuse(path, f"progress.history[{k}]", "is not a row of named numbers")
        for key, value in row.items():
            if not isinstance(key, str) or not _COLUMN.fullmatch(key):
                raise _refuse(path, f"progress.history[{k}]", f"has a column {key!r:.60}")
            if not (_is_number(value) or value is None):
                raise _refuse(
                    path, f"progress.history[{k}][{key!r}]", f"is {value!r:.60}, not a number"
                )


def check_progress(path: Path, progress: Any, limits: ProgressLimits | None = None) -> None:
    """Refuses a progress record of the wrong types or ranges, or (with ``limits``) one the
    run's config could not have reached."""
    if not isinstance(progress, dict):
        raise _refuse(path, "progress", "is not a record")
    for key, low in _COUNTS.items():
        value = progress.get(key)
        if not _is_int(value) or value < low:
            raise _refuse(
                path, f"progress.{key}", f"is {value!r:.60}; expected an integer >= {low}"
            )
    _check_history(path, progress.get("history"))
    best = progress.get("best")
    if not (best is None or _is_number(best)):
        raise _refuse(path, "progress.best", f"is {best!r:.60}, not a number")
    sums = progress.get("epoch_sums")
    if not isinstance(sums, dict) or not all(
        isinstance(k, str) and (_is_number(v) or isinstance(v, torch.Tensor))
        for k, v in sums.items()
    ):
        raise _refuse(path, "progress.epoch_sums", "is not a record of named sums")
    stopped = progress.get("stopped")
    # (logged as it is: a newline or an escape code in it would forge the log's lines)
    if not isinstance(stopped, str) or len(stopped) > _MAX_STOPPED or _CONTROL.search(stopped):
        raise _refuse(path, "progress.stopped", "is not a short line of text")
    epoch, batch, step = progress["epoch"], progress["batch"], progress["step"]
    if len(progress["history"]) != epoch:
        raise _refuse(
            path,
            "progress.epoch",
            f"is {epoch} but the history has {len(progress['history'])} rows",
        )
    # best.pt is written before its epoch ends (best_epoch == epoch), and may be resumed from
    if progress["best_epoch"] > epoch:
        raise _refuse(
            path, "progress.best_epoch", f"is {progress['best_epoch']}, past the epoch {epoch}"
        )
    if batch > step:
        raise _refuse(path, "progress.batch", f"is {batch}, more than the {step} steps taken")
    rngs = progress.get("rank_rng", [])
    if not isinstance(rngs, list):
        raise _refuse(path, "progress.rank_rng", "is not a list of RNG states")
    for k, rng in enumerate(rngs):
        check_rng(path, rng, f"progress.rank_rng[{k}]")
    if limits is not None:
        _check_limits(path, progress, limits)


def _check_limits(path: Path, progress: dict[str, Any], limits: ProgressLimits) -> None:
    epoch, batch, step = progress["epoch"], progress["batch"], progress["step"]
    if epoch > limits.epochs:
        raise _refuse(
            path,
            "progress.epoch",
            f"is {epoch}, past trainer.epochs={limits.epochs} (a resume may add epochs, not "
            "remove them)",
        )
    if batch > limits.batches:
        raise _refuse(
            path, "progress.batch", f"is {batch}, past the epoch's {limits.batches} batches"
        )
    if step > epoch * limits.batches + batch:
        raise _refuse(
            path,
            "progress.step",
            f"is {step}, more than {epoch} epoch(s) of {limits.batches} batches and {batch} hold",
        )


# ---------------------------------------------------------------------- RNG states


def _try_rng(path: Path, field: str, apply: Any) -> None:
    try:
        apply()
    except (TypeError, ValueError, RuntimeError, IndexError, KeyError, OverflowError) as exc:
        detail = (str(exc).splitlines() or [type(exc).__name__])[0][:120]
        raise _refuse(path, field, f"is not a random generator's state ({detail})") from None


def _numpy_state(state: Any) -> tuple[Any, ...]:
    kind, keys, pos, has_gauss, cached = state
    if not isinstance(keys, torch.Tensor) or keys.dtype != torch.int64 or keys.shape != (624,):
        raise ValueError("its keys are not 624 integers")
    if not all(_is_int(v) for v in (pos, has_gauss)) or not _is_number(cached):
        raise ValueError("its position, flag or cached value is not a number")
    if not 0 <= pos <= 624:  # numpy reads keys[pos] unchecked: past 624 it dies of SIGSEGV
        raise ValueError(f"its position {pos} is not in 0..624")
    return (kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached)


def _python_state(state: Any) -> tuple[Any, ...]:
    version, keys, gauss = state
    if not isinstance(keys, (list, tuple)) or len(keys) != 625 or not all(map(_is_int, keys)):
        raise ValueError("its keys are not 625 integers")
    return (version, tuple(keys), gauss)


def check_rng(path: Path, rng: Any, field: str = "rng") -> None:
    """Refuses an RNG record any generator of which would not take its state: each is set on
    a scratch generator of its kind, never on the process's own."""
    if not isinstance(rng, dict) or not {"python", "numpy", "torch"} <= set(rng):
        raise _refuse(path, field, "is not a record of the python, numpy and torch states")
    _try_rng(
        path, f"{field}.python", lambda: random.Random().setstate(_python_state(rng["python"]))
    )
    _try_rng(
        path,
        f"{field}.numpy",
        lambda: np.random.RandomState().set_state(_numpy_state(rng["numpy"])),
    )
    _try_rng(path, f"{field}.torch", lambda: torch.Generator().set_state(rng["torch"]))
    cuda = rng.get("cuda", [])
    if not isinstance(cuda, (list, tuple)) or not all(
        isinstance(t, torch.Tensor) and t.dtype == torch.uint8 and t.dim() == 1 for t in cuda
    ):
        raise _refuse(path, f"{field}.cuda", "is not a list of byte tensors")
    for k, state in enumerate(cuda):
        # torch's CUDA generator takes its seed (8 bytes) and offset (8 more), or the seed
        # alone; any other size is a "RNG state is wrong size" RuntimeError mid-resume.
        if state.numel() not in (8, 16):
            raise _refuse(
                path,
                f"{field}.cuda[{k}]",
                f"holds {state.numel()} bytes, not a CUDA generator's 16",
            )


# ---------------------------------------------------------------------- states and their owners


def _check_same(path: Path, field: str, saved: Any, own: Mapping[str, torch.Tensor]) -> None:
    """``saved``: a mapping with exactly ``own``'s names, each tensor of its shape."""
    if not isinstance(saved, Mapping):
        raise _refuse(path, field, "is not a mapping of named tensors")
    for name, mine in own.items():
        theirs = saved.get(name)
        if not isinstance(theirs, torch.Tensor):
            raise _refuse(path, f"{field}.{name}", "is missing or not a tensor")
        if theirs.shape != mine.shape or theirs.is_floating_point() != mine.is_floating_point():
            raise _refuse(
                path,
                f"{field}.{name}",
                f"has shape {list(theirs.shape)} ({theirs.dtype}) but this model's is "
                f"{list(mine.shape)} ({mine.dtype})",
            )
    extra = sorted(set(saved) - set(own), key=str)
    if extra:
        raise _refuse(path, f"{field}.{extra[0]}", "is not part of this model")


def _check_ema(path: Path, saved: Any, ema: Any) -> None:
    average = saved.get("average") if isinstance(saved, Mapping) else None
    own = {str(k): t for k, t in enumerate(ema.state_dict()["average"])}
    if not isinstance(average, list):
        raise _refuse(path, "ema.average", "is not a list of tensors")
    _check_same(path, "ema.average", {str(k): t for k, t in enumerate(average)}, own)
    if not _is_int(saved.get("steps")) or saved["steps"] < 0:
        raise _refuse(path, "ema.steps", "is not a count")


def check_state_fits(
    path: Path,
    payload: Mapping[str, Any],
    model: torch.nn.Module,
    optimizer: Any = None,
    states: Mapping[str, Any] | None = None,
) -> None:
    """Refuses a payload whose model, optimizer or ``states`` (the parameter average) would
    not fit this run's, before any of it is copied in."""
    from foldexp.train.optimizer_checks import check_optimizer  # (it uses this module's helpers)

    _check_same(path, "model", payload.get("model"), model.state_dict())
    if optimizer is not None:
        saved = payload.get("optimizer")
        parts = getattr(optimizer, "optimizers", None)
        if parts is None:
            check_optimizer(path, "optimizer", saved, optimizer)
        else:  # an OptimizerSet: one state per optimizer
            listed = saved.get("optimizers") if isinstance(saved, Mapping) else None
            if not isinstance(listed, list) or len(listed) != len(parts):
                raise _refuse(path, "optimizer", f"does not hold {len(parts)} optimizers' states")
            for k, (theirs, opt) in enumerate(zip(listed, parts)):
                check_optimizer(path, f"optimizer.optimizers[{k}]", theirs, opt)
    for name, obj in (states or {}).items():
        if name == "ema" and name in payload:
            _check_ema(path, payload[name], obj)
