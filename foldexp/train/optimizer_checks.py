"""A checkpoint's optimizer state, checked before torch's ``load_state_dict`` sees any of it.

Torch copies a saved optimizer state in as it is: its groups' settings replace the optimizer's
own, and its per-parameter tensors are used by the next ``step()`` unchecked. A fused kernel
handed an ``exp_avg`` that is a single number where it expects one of its parameter's shape
reads and writes past the end of it (seen: SIGSEGV); a missing ``exp_avg``, a ``step`` of a
parameter's shape, an ``lr`` that is text or ``amsgrad`` switched on without its state fail deep
inside torch with a multi-screen traceback. So each saved group must hold this optimizer's
parameters and settings of the kinds this optimizer has (its switches equal to this run's: the
config decides them), and each parameter's state exactly the tensors its optimizer keeps: its
``step`` a finite count, every other tensor of its parameter's shape and kind of number.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from foldexp.train.checkpoint_checks import _is_int, _is_number, _refuse
from foldexp.train.optim import ROUTE_KEYS

__all__ = ["check_optimizer"]

# The per-parameter state each of foldexp's optimizers reads in ``step()`` once it has begun
# (``max_exp_avg_sq`` too with ``amsgrad``); SGD's ``momentum_buffer`` may be absent or None.
_NEEDS = {
    "Adam": ("step", "exp_avg", "exp_avg_sq"),
    "AdamW": ("step", "exp_avg", "exp_avg_sq"),
    "Adagrad": ("step", "sum"),
}


def _setting_fault(saved: Any, mine: Any) -> str | None:
    """Why a saved group setting cannot stand where this optimizer's is ``mine``, or ``None``:
    switches (booleans, ``None``, text) equal to this run's, numbers finite numbers, sequences
    (``betas``) as many finite numbers."""
    if mine is None or isinstance(mine, (bool, str)):
        return (
            None if saved == mine and type(saved) is type(mine) else f"is not this run's {mine!r}"
        )
    if _is_number(mine):
        return None if _is_number(saved) and math.isfinite(saved) else "is not a finite number"
    if isinstance(mine, (list, tuple)):
        ok = isinstance(saved, (list, tuple)) and len(saved) == len(mine)
        ok = ok and all(_is_number(v) and math.isfinite(v) for v in saved)
        return None if ok else f"is not {len(mine)} finite numbers"
    return None if saved == mine else "is not this run's"


# A run's own choice of kernels may differ from the saved one (a sparse table's step is not
# fused); either gives the same update, so only its kind is checked.
_ROUTES = frozenset(ROUTE_KEYS)


def _check_group(
    path: Path, field: str, theirs: Mapping[str, Any], mine: Mapping[str, Any]
) -> None:
    for key, value in theirs.items():
        if key == "params":
            continue
        if key in _ROUTES:  # how torch runs the step, not what it computes: any switch
            fault = None if value is None or isinstance(value, bool) else "is not a switch"
        elif key in mine:
            fault = _setting_fault(value, mine[key])
        else:  # one set by a schedule not yet built (``initial_lr``), or by another torch
            plain = value is None or isinstance(value, bool)
            fault = None if plain or _setting_fault(value, 0.0) is None else "is not a number"
        if fault is not None:
            raise _refuse(path, f"{field}.{key}", f"{fault} ({value!r:.40})")
    # torch takes the saved group in place of ours, and ``step()`` reads every setting: one
    # left out (``lr``) is a KeyError traceback at the first step after the resume.
    missing = sorted(k for k in mine if k not in theirs and k != "params" and k not in _ROUTES)
    if missing:
        raise _refuse(path, f"{field}.{missing[0]}", "is missing")


def _step_fault(value: Any) -> str | None:
    if isinstance(value, torch.Tensor):
        # (a bool step passes the rest, then fails torch's ``step += 1`` with a traceback)
        bad = value.dim() or value.is_complex() or value.dtype == torch.bool
        if bad or not math.isfinite(value) or value < 0:
            return "is not a count (a single finite number >= 0)"
        return None
    return None if _is_number(value) and math.isfinite(value) and value >= 0 else "is not a count"


def _check_entry(
    path: Path, field: str, entry: Mapping[Any, Any], param: torch.Tensor, needs: tuple[str, ...]
) -> None:
    """One parameter's state: the tensors ``needs`` names, each of ``param``'s shape and kind."""
    missing = [key for key in needs if key not in entry]
    if missing:
        raise _refuse(path, f"{field}.{missing[0]}", "is missing")
    for key, value in entry.items():
        name = f"{field}.{key}"
        if key == "step":
            fault = _step_fault(value)
        elif isinstance(value, torch.Tensor):
            fault = (
                f"has shape {list(value.shape)} but its parameter {list(param.shape)}"
                if value.shape != param.shape
                else f"is {value.dtype}, its parameter {param.dtype}"
                if value.is_floating_point() != param.is_floating_point()
                else None
            )  # fmt: skip
        elif value is None or _is_number(value):
            fault = None if value is None or math.isfinite(value) else "is not finite"
        else:
            fault = "is not a number or a tensor"
        if fault is not None:
            raise _refuse(path, name, fault)


def check_optimizer(path: Path, field: str, saved: Any, optimizer: Any) -> None:
    """One torch optimizer's state: its groups hold as many parameters as ours, with settings
    of our settings' kinds (``_setting_fault``), and every parameter's state the tensors its
    optimizer reads, of its parameter's shape (``_check_entry``)."""
    groups = optimizer.param_groups
    if not isinstance(saved, Mapping) or not isinstance(saved.get("param_groups"), list):
        raise _refuse(path, field, "is not an optimizer's state")
    if len(saved["param_groups"]) != len(groups):
        raise _refuse(
            path,
            f"{field}.param_groups",
            f"has {len(saved['param_groups'])} groups, not {len(groups)}",
        )
    params: dict[Any, tuple[torch.Tensor, tuple[str, ...]]] = {}
    for k, (theirs, mine) in enumerate(zip(saved["param_groups"], groups)):
        ids = theirs.get("params") if isinstance(theirs, Mapping) else None
        if not isinstance(ids, list) or len(ids) != len(mine["params"]):
            raise _refuse(
                path, f"{field}.param_groups[{k}]", "does not hold this model's parameters"
            )
        if not all(_is_int(i) for i in ids) or len(set(ids) | set(params)) != len(ids) + len(
            params
        ):
            raise _refuse(path, f"{field}.param_groups[{k}].params", "are not distinct integers")
        _check_group(path, f"{field}.param_groups[{k}]", theirs, mine)
        needs = _NEEDS.get(type(optimizer).__name__, ())
        needs += ("max_exp_avg_sq",) if needs and mine.get("amsgrad") else ()
        params.update((i, (p, needs)) for i, p in zip(ids, mine["params"]))
    state = saved.get("state", {})
    if not isinstance(state, Mapping):
        raise _refuse(path, f"{field}.state", "is not a mapping")
    for pid, entry in state.items():
        if pid not in params or not isinstance(entry, Mapping):
            raise _refuse(path, f"{field}.state[{pid!r:.20}]", "belongs to no parameter")
        _check_entry(path, f"{field}.state[{pid}]", entry, *params[pid])
