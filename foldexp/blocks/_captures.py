"""What a plain function given to ``Function`` reaches that the compiled model would not see.

``Function(module)`` makes the module's parameters the compiled model's, and lets the scheduler
see its dropout. A plain function (a lambda, a ``def``, a ``functools.partial``, a bound method)
that uses a module or a trainable tensor from its closure, its defaults, its bound object or the
globals it names gets neither: the batched run treats what it reaches as constants, so those
parameters would silently get no gradient (eager evaluation gives them one), and equal
invocations of its dropout would be computed once. ``reached_state`` finds such objects, so
that ``Function`` can refuse them and name the fix. It follows the functions it reaches (a helper
that calls a module) up to ``MAX_DEPTH`` calls deep, and looks one level into the attributes of
a plain object it reaches (a method bound to a class that holds a module).
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Iterator
from typing import Any

import torch

from foldexp.blocks._ops import RANDOM_MODULES

__all__ = ["reached_state", "reached_modules", "MAX_DEPTH"]

#: How many functions deep the search follows helpers (the function given is depth 0).
MAX_DEPTH = 4

_CALLABLES = (functools.partial, types.MethodType, types.FunctionType)


def reached_state(fn: Callable[..., Any], random: bool) -> list[str]:
    """A description of each trainable module or tensor, and (unless ``random``) each module
    with dropout, that ``fn`` reaches; empty for an ``nn.Module`` (the compiler sees it)."""
    if isinstance(fn, torch.nn.Module):
        return []
    found: list[str] = []
    seen: set[int] = set()
    for where, obj in _reached(fn, depth=0, visited=set()):
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        what = _hidden_state(obj, random)
        if what:
            found.append(f"{where} ({what})")
    return found


def reached_modules(fn: Callable[..., Any]) -> list[torch.nn.Module]:
    """The modules a plain ``fn`` reaches (those ``reached_state`` lets through: frozen, no
    dropout), where it holds them as ``_hidden_state`` looks; empty for an ``nn.Module``."""
    if isinstance(fn, torch.nn.Module):
        return []
    found: dict[int, torch.nn.Module] = {}
    for _, obj in _reached(fn, depth=0, visited=set()):
        for m in _modules_in(obj):
            found.setdefault(id(m), m)
    return list(found.values())


def _modules_in(obj: Any) -> Iterator[torch.nn.Module]:
    """The modules ``obj`` is or holds (``_parts``)."""
    if isinstance(obj, torch.nn.Module):
        yield obj
        return
    for part in _parts(obj):
        yield from _modules_in(part)


def _parts(obj: Any) -> Iterator[Any]:
    """What a container ``obj`` holds that may be state: a list's or tuple's items, a dict's
    values, a plain object's module, tensor and container attributes (a method bound to a
    plain class that keeps its layers as attributes); nothing for anything else."""
    if isinstance(obj, (list, tuple)):
        yield from obj
    elif isinstance(obj, dict):
        yield from obj.values()
    elif _plain_object(obj):
        yield from (v for v in vars(obj).values() if _state_like(v))


def _reached(fn: Any, depth: int, visited: set[int]) -> Iterator[tuple[str, Any]]:
    """``(where, object)`` for what ``fn`` holds -- a partial's function and arguments, a bound
    method's object, a function's closure, defaults and the globals its code names -- and, for
    each function among them, what that function holds (``visited``: the ids already searched,
    so a function that names itself is searched once)."""
    if depth > MAX_DEPTH or id(fn) in visited:
        return
    visited.add(id(fn))
    for where, obj in _held(fn, depth, visited):
        yield where, obj
        if isinstance(obj, _CALLABLES):
            for inner, value in _reached(obj, depth + 1, visited):
                yield f"{inner}, inside {where}", value


def _held(fn: Any, depth: int, visited: set[int]) -> Iterator[tuple[str, Any]]:
    """What ``fn`` itself holds (see ``_reached``)."""
    if isinstance(fn, functools.partial):
        yield from _reached(fn.func, depth + 1, visited)
        for value in (*fn.args, *fn.keywords.values()):
            yield "an argument bound by functools.partial", value
        return
    if isinstance(fn, types.MethodType):
        yield f"`{type(fn.__self__).__name__}` object the method is bound to", fn.__self__
        fn = fn.__func__
    if not isinstance(fn, types.FunctionType):
        return
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        try:
            yield f"`{name}` from its closure", cell.cell_contents
        except ValueError:  # a cell not filled yet
            continue
    for value in (*(fn.__defaults__ or ()), *(fn.__kwdefaults__ or {}).values()):
        yield "a default argument", value
    for name in fn.__code__.co_names:
        if name in fn.__globals__:
            yield f"global `{name}`", fn.__globals__[name]


def _hidden_state(obj: Any, random: bool) -> str | None:
    """What in ``obj`` the compiled model would miss, or ``None``; in a container, what its
    parts hold (``_parts``)."""
    if isinstance(obj, torch.nn.Module):
        trainable = sum(p.numel() for p in obj.parameters() if p.requires_grad)
        if trainable:
            return f"{type(obj).__name__} with {trainable:,} trainable parameters"
        if not random and any(
            isinstance(m, RANDOM_MODULES) and getattr(m, "p", 1.0) > 0 for m in obj.modules()
        ):
            return f"{type(obj).__name__}, random in training"
        return None
    if isinstance(obj, torch.Tensor):
        return (
            f"a tensor of shape {tuple(obj.shape)} that requires grad"
            if obj.requires_grad
            else None
        )
    return next((w for w in (_hidden_state(p, random) for p in _parts(obj)) if w), None)


def _state_like(value: Any) -> bool:
    return isinstance(value, (torch.nn.Module, torch.Tensor, list, tuple, dict))


def _plain_object(obj: Any) -> bool:
    """An instance of a user's class with attributes: not a class, module, function or one of
    Python's own values."""
    return (
        hasattr(obj, "__dict__")
        and not isinstance(obj, (type, types.ModuleType, *_CALLABLES, types.BuiltinFunctionType))
        and type(obj).__module__ != "builtins"
    )
