"""Captures shared by ops of one structure: another model built of the same cells.

A capture (``capture.py``) costs a fraction of a second of tracing, and Inductor's compile more;
a process that builds the same model again (a sweep's next run, an ensemble's members, a
``predict`` after ``train``, a test suite) would pay it once per op of every model. The graphs
depend on an op's code and on the values that code reads besides its parameters (the graphs'
inputs), so two ops whose code and values are equal can run the same graphs.

``structure_key(op, params)`` describes that: the op's class, its function's code, closure and
defaults, every module in it with its class and its attributes' values, each parameter as its
place in ``params`` (the graphs' inputs), and the op's types. An op holding anything it cannot
describe by value (a tensor that is no parameter, an object of an unknown kind) has no key and
is captured on its own, as are random ops, whose graphs no eager run can check by value.

What a key cannot see (a global variable or a class changed between two captures) is checked
the way every capture is: a shared capture's first use by an op is compared with that op's body
run eagerly, values and gradients (``capture._check_against_eager``); an op that differs gets
its own capture.
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

__all__ = ["MAX_KEPT", "clear", "keep", "kept", "structure_key"]

# Structures whose captures are kept; the least recently used goes first. A process that
# builds model after model of new shapes (a sweep over hidden sizes) keeps this many.
MAX_KEPT = 256
_kept: OrderedDict[tuple, list[Any]] = OrderedDict()

_VALUES = (type(None), bool, int, float, complex, str, bytes, range, slice, enum.Enum, Type)
_TORCH_VALUES = (torch.dtype, torch.device, torch.Size, torch.layout, torch.memory_format)
# Kinds that are equal only to themselves and hold no state a graph reads: compared by identity.
_BY_IDENTITY = (
    types.BuiltinFunctionType,
    types.BuiltinMethodType,
    types.WrapperDescriptorType,
    types.MethodDescriptorType,
    types.MethodWrapperType,
    types.ModuleType,
    types.CodeType,
    type,
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
    ``None`` where the op cannot share captures (random, or holding a value the key cannot
    describe)."""
    if op.is_random():
        return None
    try:
        return _Walk({id(p): i for i, p in enumerate(params)}).value(op)
    except (_Opaque, RecursionError):
        return None


def kept(key: tuple) -> list[Any]:
    """The captures kept for ``key`` (``structure_key`` with the capture's own key), newest
    last; an empty list where there are none."""
    caps = _kept.get(key)
    if caps is None:
        return []
    _kept.move_to_end(key)
    return list(caps)


def keep(key: tuple, cap: Any) -> None:
    """Keeps ``cap`` for ops of ``key``'s structure, dropping the least recently used key
    beyond ``MAX_KEPT``."""
    _kept.setdefault(key, []).append(cap)
    _kept.move_to_end(key)
    while len(_kept) > MAX_KEPT:
        _kept.popitem(last=False)


class _Walk:
    """One description: objects met twice (a module in two places, a cycle) are described the
    second time by the order they were first met, so that sharing is part of the structure."""

    def __init__(self, params: dict[int, int]) -> None:
        self.params = params
        self.met: dict[int, int] = {}
        self.nodes = 0

    def value(self, x: Any) -> Any:
        self.nodes += 1
        if self.nodes > _MAX_NODES:
            raise _Opaque("too large")
        if isinstance(x, _VALUES) or isinstance(x, _TORCH_VALUES):
            return (type(x), x)
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
        return self._object(x)

    def _object(self, x: Any) -> Any:
        if isinstance(x, dict):
            return (type(x), tuple((self.value(k), self.value(v)) for k, v in x.items()))
        if isinstance(x, (set, frozenset)):
            return (type(x), frozenset(self.value(v) for v in x))
        if isinstance(x, types.FunctionType):
            cells = tuple(self._cell(c) for c in x.__closure__ or ())
            # equal code objects of two modules read two modules' globals
            where = (x.__module__, x.__qualname__, id(x.__globals__))
            defaults = (self.value(x.__defaults__), self.value(x.__kwdefaults__))
            return ("fn", x.__code__, where, defaults, cells)
        if isinstance(x, types.MethodType):
            return ("method", self.value(x.__func__), self.value(x.__self__))
        if isinstance(x, functools.partial):
            return ("partial", self.value(x.func), self.value(x.args), self.value(x.keywords))
        if isinstance(x, torch.nn.Module):
            return self._module(x)
        if isinstance(x, Op):
            state = {k: v for k, v in vars(x).items() if k not in _OP_DERIVED}
            return (type(x), self.value(state))
        if type(x).__dict__.get("__slots__") is None and hasattr(x, "__dict__"):
            return (type(x), self.value(vars(x)))
        raise _Opaque(f"a {type(x).__name__}")

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


def clear() -> None:
    """Forgets every kept capture (as a fresh process has none)."""
    _kept.clear()
