"""Captures shared by ops of one structure: another model built of the same cells.

A capture (``capture.py``) costs a fraction of a second of tracing, and Inductor's compile more;
a process that builds the same model again (a sweep's next run, an ensemble's members, a
``predict`` after ``train``, a test suite) would pay it once per op of every model. The graphs
depend on an op's code and on the values that code reads besides its parameters (the graphs'
inputs), so two ops whose code and values are equal can run the same graphs.

``structure_key(op, params)`` describes that, for ops whose code is torch's or foldexp's (their
modules' classes, their functions, what those hold): the op's class and types, each function's
code, closure and defaults, each module's class and its attributes' values, each parameter as
its place in ``params``. Only that code qualifies because a key cannot see what code reads
beyond the values it holds (a module-level global, a class attribute, a slot): torch's and
foldexp's code reads nothing there that changes between two models. An op that runs a user's
own class or function, holds a tensor that is no parameter or an object of another kind, or is
random (no eager run can check its graphs by value) has no key and is captured on its own.

A shared capture's first use by an op is also checked the way every capture is: against that
op's body run eagerly, values and gradients (``capture._check_against_eager``).
"""

from __future__ import annotations

import enum
import functools
import types
from collections import OrderedDict
from typing import Any

import torch

from foldexp.blocks.internal import Op
from foldexp.types import Type

__all__ = ["MAX_KEPT", "MAX_TWINS", "clear", "keep", "kept", "structure_key"]

# Structures whose captures are kept; the least recently used goes first. A process that
# builds model after model of new shapes (a sweep over hidden sizes) keeps this many.
MAX_KEPT = 256
MAX_TWINS = 4  # captures kept per structure (row-count ranges), the oldest dropped first
_kept: OrderedDict[tuple, list[Any]] = OrderedDict()

# The packages whose code a key may describe (see the module's docstring).
_TRUSTED = ("torch", "foldexp")
_VALUES = (type(None), bool, int, str, bytes, range, enum.Enum, Type)
_TORCH_VALUES = (torch.dtype, torch.device, torch.Size, torch.layout, torch.memory_format)
# Kinds equal only to themselves, holding nothing a graph reads: compared by identity.
_BY_IDENTITY = (
    types.WrapperDescriptorType,
    types.MethodDescriptorType,
    torch._ops.OpOverload,
    torch._ops.OpOverloadPacket,
)
# An op's attributes that follow from the ones described (its types) or are the executor's.
_OP_DERIVED = {"runtime", "_module_cache", "_build_args", "_flatten_out", "name", "id_table"}
# A module's bookkeeping that its forward never reads; its hooks are described (empty or not).
_MODULE_BOOKKEEPING = {
    "_state_dict_hooks",
    "_state_dict_pre_hooks",
    "_load_state_dict_pre_hooks",
    "_load_state_dict_post_hooks",
    "_non_persistent_buffers_set",
    "_is_full_backward_hook",
}
_HOOKS = {
    "_forward_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
    "_forward_pre_hooks",
    "_forward_pre_hooks_with_kwargs",
    "_backward_hooks",
    "_backward_pre_hooks",
}
_MAX_NODES = 5000  # a walk this long describes something that is not a cell: no key


class _Opaque(Exception):
    """A value the key cannot describe."""


def structure_key(op: Op, params: list[torch.Tensor]) -> tuple | None:
    """What ``op``'s graphs depend on besides the parameters' values, as a hashable tuple;
    ``None`` where the op cannot share captures (random, running a user's code, or holding a
    value the key cannot describe)."""
    if op.is_random():
        return None
    try:
        key = _Walk({id(p): i for i, p in enumerate(params)}).value(op)
        hash(key)
    except (_Opaque, RecursionError, TypeError):
        return None
    return key


def kept(key: tuple) -> list[Any]:
    """The captures kept for ``key`` (``structure_key`` with the capture's own key), newest
    last; an empty list where there are none."""
    caps = _kept.get(key)
    if caps is None:
        return []
    _kept.move_to_end(key)
    return list(caps)


def keep(key: tuple, cap: Any) -> None:
    """Keeps ``cap`` for ops of ``key``'s structure (up to ``MAX_TWINS``), dropping the least
    recently used key beyond ``MAX_KEPT``."""
    caps = _kept.setdefault(key, [])
    caps.append(cap)
    del caps[:-MAX_TWINS]
    _kept.move_to_end(key)
    while len(_kept) > MAX_KEPT:
        _kept.popitem(last=False)


def clear() -> None:
    """Forgets every kept capture (as a fresh process has none)."""
    _kept.clear()


def _trusted(obj: Any) -> bool:
    """Whether ``obj`` (a class, function or Python module) is torch's or foldexp's."""
    name = (
        getattr(obj, "__module__", None) if not isinstance(obj, types.ModuleType) else obj.__name__
    )
    return isinstance(name, str) and name.split(".")[0] in _TRUSTED


def _trusted_class(cls: type) -> bool:
    """A class of torch's or foldexp's, with theirs above it (``object`` aside), none holding
    slots that a description of the instance's ``__dict__`` would miss."""
    return all(c is object or (_trusted(c) and "__slots__" not in c.__dict__) for c in cls.__mro__)


class _Walk:
    """One description: objects met twice (a module in two places, a cycle) are described the
    second time by the order they were first met, so that sharing is part of the structure."""

    def __init__(self, params: dict[int, int]) -> None:
        self.params = params
        self.met: dict[int, int] = {}
        self.alive: list[Any] = []  # what the walk built and met: no id reused while it runs
        self.nodes = 0

    def value(self, x: Any) -> Any:
        self.nodes += 1
        if self.nodes > _MAX_NODES:
            raise _Opaque("too large")
        if isinstance(x, float):  # -0.0 == 0.0, yet copysign tells them apart
            return ("float", x.hex())
        if isinstance(x, complex):
            return ("complex", x.real.hex(), x.imag.hex())
        if isinstance(x, _VALUES) or isinstance(x, _TORCH_VALUES):
            return (type(x), x)
        if isinstance(x, slice):  # unhashable before Python 3.12
            return ("slice", self.value(x.start), self.value(x.stop), self.value(x.step))
        if isinstance(x, _BY_IDENTITY):
            return ("is", x)
        if isinstance(x, torch.Tensor):
            if id(x) in self.params:
                return ("param", self.params[id(x)])
            raise _Opaque("a tensor that is not one of the op's parameters")
        if isinstance(x, (tuple, list)):
            return (type(x), tuple(self.value(v) for v in x))
        if id(x) in self.met:
            return ("met", self.met[id(x)])
        self.met[id(x)] = len(self.met)
        self.alive.append(x)
        return self._object(x)

    def _object(self, x: Any) -> Any:
        if isinstance(x, dict):
            return (type(x), tuple((self.value(k), self.value(v)) for k, v in x.items()))
        if isinstance(x, (set, frozenset)):
            return (type(x), frozenset(self.value(v) for v in x))
        if isinstance(x, (type, types.ModuleType)) and _trusted(x):
            return ("is", x)
        if isinstance(x, types.BuiltinFunctionType):  # a C function, or a C method of an object
            owner = x.__self__
            if owner is None or isinstance(owner, (type, types.ModuleType)):
                return ("is", x)
            return ("bound", x.__name__, type(owner), self.value(owner))
        if isinstance(x, types.FunctionType) and _trusted(x):
            cells = tuple(self._cell(c) for c in x.__closure__ or ())
            defaults = (self.value(x.__defaults__), self.value(x.__kwdefaults__))
            return ("fn", x.__code__, x.__module__, x.__qualname__, defaults, cells)
        if isinstance(x, types.MethodType):
            return ("method", self.value(x.__func__), self.value(x.__self__))
        if isinstance(x, functools.partial):
            return ("partial", self.value(x.func), self.value(x.args), self.value(x.keywords))
        if not _trusted_class(type(x)):
            raise _Opaque(f"a {type(x).__qualname__} (not torch's or foldexp's)")
        if isinstance(x, torch.nn.Module):
            return self._module(x)
        if isinstance(x, Op):
            state = {k: v for k, v in vars(x).items() if k not in _OP_DERIVED}
            self.alive.append(state)
            return (type(x), self.value(state))
        if hasattr(x, "__dict__"):
            return (type(x), self.value(vars(x)))
        raise _Opaque(f"a {type(x).__qualname__}")

    def _cell(self, cell: Any) -> Any:
        try:
            return self.value(cell.cell_contents)
        except ValueError:  # a cell not filled yet
            return ("empty",)

    def _module(self, m: torch.nn.Module) -> Any:
        parts = []
        for k, v in vars(m).items():
            if k in _MODULE_BOOKKEEPING:
                continue
            if k in _HOOKS:
                if v:
                    raise _Opaque("a module with hooks")
                continue
            if k == "_buffers" and v:
                raise _Opaque("a module with buffers")
            parts.append((k, self.value(v)))
        return (type(m), tuple(parts))
