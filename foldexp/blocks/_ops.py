"""Operations: the unit the engine batches.

An ``Op`` is one batched tensor function with flat, typed inputs and outputs. ``Function``,
``Concat`` and the layers each own exactly one op; every invocation of a block on some node of
some input becomes one invocation of its op, and the scheduler batches invocations of the same op
at the same depth into a single call of ``Op.forward`` on tensors with a leading batch dimension.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.nn.modules.module import register_module_module_registration_hook

from foldexp.blocks._base import InputError
from foldexp.blocks._layers import Embedding
from foldexp.types import TensorType, TupleType, Type, flatten_tensor_types

__all__ = ["Op", "structure_flattener", "structure_builder"]

# Modules whose training-mode output is random.
RANDOM_MODULES = (torch.nn.modules.dropout._DropoutNd, torch.nn.RReLU)

# Counts the submodules registered anywhere (torch calls the hook for every attribute, module
# list or dict entry set to a module). An op walks its module tree for random modules again
# only when this has changed or one of its modules' submodule count has (``insert`` and direct
# ``_modules`` writes pass no hook): ``is_random`` runs at every build and execution, and the
# walk costs more than a served tree's whole plan lookup.
_registrations = [0]


def _count_registration(module: Any, name: str, submodule: Any) -> None:
    _registrations[0] += 1


register_module_module_registration_hook(_count_registration)


# The hooks ``register_module_forward_hook`` / ``..._pre_hook`` put on every module: torch's own
# dictionaries, which registering and removing change in place.
_GLOBAL_FORWARD_HOOKS = getattr(torch.nn.modules.module, "_global_forward_hooks", {})
_GLOBAL_FORWARD_PRE_HOOKS = getattr(torch.nn.modules.module, "_global_forward_pre_hooks", {})


def structure_flattener(t: Type) -> Callable[[Any], list[Any]]:
    """A fast function from a value of (nested) tuple type ``t`` to its flat list of tensors."""
    if isinstance(t, TensorType):
        return lambda x: [x]
    assert isinstance(t, TupleType)
    if all(isinstance(i, TensorType) for i in t.items):
        return list
    if len(t.items) == 2 and all(
        isinstance(i, TupleType) and all(isinstance(j, TensorType) for j in i.items)
        for i in t.items
    ):
        return lambda x: [*x[0], *x[1]]  # a pair of flat tuples, e.g. two children's (h, c)
    parts = [structure_flattener(i) for i in t.items]

    def flatten(x: Any) -> list[Any]:
        out: list[Any] = []
        for f, item in zip(parts, x):
            out.extend(f(item))
        return out

    return flatten


def structure_builder(t: Type) -> Callable[[Sequence[Any]], Any]:
    """The inverse of ``structure_flattener``: a flat list back into the nested structure."""
    if isinstance(t, TensorType):
        return lambda flat: flat[0]
    assert isinstance(t, TupleType)
    if all(isinstance(i, TensorType) for i in t.items):
        return tuple
    sizes = [len(flatten_tensor_types(i)) for i in t.items]
    builders = [structure_builder(i) for i in t.items]

    def build(flat: Sequence[Any]) -> Any:
        out, pos = [], 0
        for n, b in zip(sizes, builders):
            out.append(b(flat[pos : pos + n]))
            pos += n
        return tuple(out)

    return build


class Op:
    """A batched tensor function ``fn`` with typed flat inputs and outputs.

    Args:
        fn: called as ``fn(*args)`` where ``args`` follow the nested input structure, each tensor
            with a leading batch dimension; returns a tensor or a (nested) tuple of tensors.
        input_type: a tensor type or nested tuple of tensor types (no batch dimension).
        output_type: likewise, for what ``fn`` returns.
        module: the ``nn.Module`` holding the op's parameters, if any; gradients are computed
            with respect to its parameters.
        name: shown in schedules.
        random: ``fn`` draws random numbers of its own (beyond ``nn.Module`` dropout, which is
            detected): its invocations are never merged (see ``is_random``).
        reached: modules a plain ``fn`` calls without holding them as ``module`` (frozen ones
            from its closure): their hooks count as the op's (``has_forward_hooks``).
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        input_type: Type,
        output_type: Type,
        module: torch.nn.Module | None,
        name: str,
        random: bool = False,
        reached: Sequence[torch.nn.Module] = (),
    ) -> None:
        self.fn = fn
        self.random = random
        self.reached = list(reached)
        self.input_type = input_type
        self.output_type = output_type
        self.module = module
        self.name = name
        self.in_types = flatten_tensor_types(input_type)
        self.out_types = flatten_tensor_types(output_type)
        self.n_out = len(self.out_types)
        self._build_args = structure_builder(input_type)
        self._flatten_out = structure_flattener(output_type)
        self._spread = isinstance(input_type, TupleType)
        # A lookup table reading its ids straight from the input: they are checked (``check_ids``).
        self.id_limit, self.id_table = _lookup_table(fn)
        # (``_registrations`` when walked, each module with its children then, the modules,
        # the random ones among them)
        self._module_cache: tuple[int, list[tuple[Any, list[Any]]], list[Any], list[Any]] = (
            -1, [], [], [],
        )  # fmt: skip
        # What the executor keeps per op between calls (its pointwise fusion): a cache of this
        # process's, never copied or pickled with the op.
        self.runtime: dict[str, Any] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "runtime": {}}

    def check_ids(self, ids: torch.Tensor | int) -> None:
        """For an op looking ids up in a table (``id_limit`` rows): raises ``InputError`` for the
        first id outside ``[0, id_limit)`` in ``ids`` (a tensor or one id); the caller adds the
        block and the path."""
        limit = self.id_limit
        if limit is None:
            return
        flat = torch.as_tensor(ids).reshape(-1)
        outside = (flat < 0) | (flat >= limit)
        if bool(outside.any()):
            bad = int(flat[outside][0])
            raise InputError(
                None, f"id {bad} is outside {self.id_table}: expected 0 <= id < {limit}"
            )

    def forward(self, args: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Runs the op on flat batched inputs; returns flat batched outputs."""
        if self._spread:
            out = self.fn(*self._build_args(args))
        else:
            out = self.fn(args[0])
        return self._flatten_out(out)

    def parameters(self) -> list[torch.nn.Parameter]:
        return list(self.module.parameters()) if self.module is not None else []

    def is_random(self) -> bool:
        """Whether two invocations on equal inputs may give different outputs right now: the
        op was declared ``random``, or a module in it is a dropout (or RReLU) in training mode.

        The scheduler merges equal invocations of ops that are not (``schedule``'s ``merge``).
        """
        if self.random:
            return True
        for m in self._walk()[1]:
            if m.training and getattr(m, "p", 1.0) > 0:
                return True
        return False

    def has_forward_hooks(self) -> bool:
        """Whether a forward hook or pre-hook is registered on a module in the op, or on every
        module (``register_module_forward_hook``): a hook may keep the op's arguments, which a
        kept plan's next run would rewrite (``executor/replay.py``)."""
        if _GLOBAL_FORWARD_HOOKS or _GLOBAL_FORWARD_PRE_HOOKS:
            return True
        for m in self._walk()[0]:
            if m._forward_hooks or m._forward_pre_hooks:
                return True
        return False

    def _walk(self) -> tuple[list[Any], list[Any]]:
        """The op's modules and the random ones among them, walked again when a module was
        registered anywhere since or a module's children changed: ``Sequential.insert`` and
        direct ``_modules`` writes (quantization's ``convert``) pass no registration hook, and
        torch calls that hook before it stores the child."""
        seen, tree, modules, randoms = self._module_cache
        stale = seen != _registrations[0]
        for m, children in tree:  # a loop, not any(): this runs at every build and run
            if stale:
                break
            stale = list(m._modules.values()) != children  # identities first: cheap
        if stale:
            seen = _registrations[0]  # read first: a registration during the walk, walk again
            roots = [self.fn if isinstance(self.fn, torch.nn.Module) else self.module]
            modules = list(
                {id(m): m for r in (*roots, *self.reached) if r is not None for m in r.modules()}
                .values()
            )  # fmt: skip
            tree = [(m, list(m._modules.values())) for m in modules]
            randoms = [m for m in modules if isinstance(m, RANDOM_MODULES)]
            # One assignment: threads see all of it or none.
            self._module_cache = (seen, tree, modules, randoms)
        return modules, randoms

    def __repr__(self) -> str:
        return f"Op({self.name})"


def _lookup_table(fn: Any) -> tuple[int | None, str]:
    """``(rows, name)`` of ``fn`` if it is an embedding table (ours or torch's), else
    ``(None, "")``."""
    if isinstance(fn, Embedding):
        return fn.num_buckets, repr(fn)
    if isinstance(fn, torch.nn.Embedding):
        return fn.num_embeddings, f"Embedding({fn.num_embeddings}, {fn.embedding_dim})"
    return None, ""
