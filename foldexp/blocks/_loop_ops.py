"""What ``While`` and ``Unfold`` (``_loops.py``) run: a block traced once into a template, and the
loop's op.

A loop's state is a tensor or a tuple of tensors, so every instance of a loop traces its
``cond``, ``body`` or ``step`` alike: ``Template`` traces the block once on placeholder values
and replays its ops on the rows of all the instances still active, one batched call per op.
``LoopOp`` is the op the scheduler batches: one invocation per loop instance, one call per depth;
its parameters, randomness and hooks are those of the ops inside its templates.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from typing import Any

import torch

from foldexp.blocks._base import Block, Tracer
from foldexp.blocks._eager import EagerTracer
from foldexp.blocks._ops import Op, structure_builder, structure_flattener
from foldexp.types import TensorType, Type, flatten_tensor_types, is_tensor_tree

__all__ = [
    "LoopOp",
    "Template",
    "truth",
    "partition",
    "sorted_partition",
    "plain_torch",
    "check_scalar_condition",
    "check_state",
    "check_limit",
    "is_eager",
]


class _NoFusion:
    """What ``executor/calls.call_op`` finds in a loop op's ``runtime``: run it as written (its
    Python loop cannot be traced by ``torch.fx``; its inner ops run their own bodies)."""

    unfusable = True


class _Placeholder:
    """A tracer that records a block's operations on placeholder values, running nothing."""

    # A loop inside another loop's body runs once per outer iteration: its counts are not
    # per instance, so they are not recorded.
    records_loop_counts = False

    def __init__(self, owner: Block) -> None:
        self.owner = owner
        self.n = 0
        self.constants: list[tuple[int, TensorType, Any]] = []
        self.steps: list[tuple[Op, list[int], list[int]]] = []
        self._zeros: dict[TensorType, int] = {}

    def _new(self) -> int:
        self.n += 1
        return self.n - 1

    def constant(self, ttype: TensorType, payload: Any) -> int:
        vid = self._new()
        self.constants.append((vid, ttype, payload))
        return vid

    def zeros(self, ttype: TensorType) -> int:
        if ttype not in self._zeros:
            self._zeros[ttype] = self.constant(ttype, 0 if not ttype.shape else None)
        return self._zeros[ttype]

    def apply(self, op: Op, args: list[int]) -> list[int]:
        outs = [self._new() for _ in range(op.n_out)]
        self.steps.append((op, list(args), outs))
        return outs if op.n_out == 1 else tuple(outs)  # type: ignore[return-value]

    def metric(self, name: str, value: Any) -> None:
        raise TypeError(
            f"{self.owner!r}: Metric({name!r}) inside a loop's cond, body or step is not "
            "supported (record the loop's output instead)"
        )


class Template:
    """``block`` on ``in_type`` traced once on placeholders; ``run`` replays it on batched rows."""

    def __init__(self, owner: Block, block: Block, in_type: Type, out_type: Type) -> None:
        from foldexp.blocks._steps import run_steps

        tr = _Placeholder(owner)
        self.inputs = [tr._new() for _ in flatten_tensor_types(in_type)]
        out = run_steps(block, tr, structure_builder(in_type)(self.inputs))
        self.outputs = structure_flattener(out_type)(out)
        self.constants = tr.constants
        self.steps = tr.steps
        self.size = tr.n
        self.ops = list({id(op): op for op, _, _ in tr.steps}.values())
        self._constants: dict[torch.device, list[torch.Tensor]] = {}  # per device, made once
        self._replay = self._compile()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_replay"]  # a closure: rebuilt from the rest
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._replay = self._compile()

    def _constant_rows(self, device: torch.device) -> list[torch.Tensor]:
        """The constants as one row each on ``device`` (made once per device, not per call)."""
        rows = self._constants.get(device)
        if rows is None:
            from foldexp.blocks._eager import payload_tensor

            rows = [
                torch.zeros(t.shape, dtype=t.dtype) if p is None else payload_tensor(t, p)
                for _, t, p in self.constants
            ]
            rows = self._constants[device] = [r.to(device).unsqueeze(0) for r in rows]
        return rows

    def run(self, args: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Every op of the template once, over all rows of ``args`` (flat, batched)."""
        return self._replay(args)

    def _compile(self) -> Any:
        """The replay as a closure, built once: the loop calls it every iteration, so what
        can be decided from the template alone is not decided again there. A template of
        one op on the inputs in order (a ``Function`` body) is that op's ``forward``; one with
        no op (a ``GetItem`` condition) picks its outputs from the inputs."""
        n_in, outputs = len(self.inputs), self.outputs
        plain_inputs = self.inputs == list(range(n_in))
        if not self.steps and not self.constants and plain_inputs:
            if outputs == list(range(n_in)):
                return list
            return lambda args: [args[v] for v in outputs]
        if len(self.steps) == 1 and not self.constants and plain_inputs:
            op, arg_ids, out_ids = self.steps[0]
            if arg_ids == list(range(n_in)) and outputs == out_ids:
                forward = op.forward
                return lambda args: list(forward(list(args)))
        steps = [(op.forward, arg_ids, out_ids) for op, arg_ids, out_ids in self.steps]

        def replay(args: Sequence[torch.Tensor]) -> list[torch.Tensor]:
            vals: list[Any] = [None] * self.size
            for vid, a in zip(self.inputs, args):
                vals[vid] = a
            if self.constants:
                n = args[0].shape[0]
                rows = self._constant_rows(args[0].device)
                for (vid, ttype, _), row in zip(self.constants, rows):
                    vals[vid] = row.expand(n, *ttype.shape)
            for forward, arg_ids, out_ids in steps:
                for vid, o in zip(out_ids, forward([vals[a] for a in arg_ids])):
                    vals[vid] = o
            return [vals[v] for v in outputs]

        return replay


def truth(block: Block, c: torch.Tensor) -> torch.Tensor:
    """A condition's rows as booleans (a float condition is read as ``> 0``)."""
    return c if c.dtype == torch.bool else c > 0


def partition(keep: torch.Tensor, n_keep: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rows where keep, rows where not)``, in order, given ``n_keep`` (the count, which the
    loop has read already): on a GPU one stable sort, which waits for nothing, so the loop
    waits for the device once per iteration (that read), whatever leaves; on the CPU two
    ``nonzero`` s, cheaper than a sort."""
    if keep.device.type == "cpu":
        return keep.nonzero().squeeze(1), keep.logical_not().nonzero().squeeze(1)
    return sorted_partition(keep, n_keep)


def sorted_partition(keep: torch.Tensor, n_keep: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``partition`` by one stable sort (the kept rows first), without reading anything."""
    order = torch.argsort(keep.logical_not().to(torch.uint8), stable=True)
    return order[:n_keep], order[n_keep:]


def plain_torch() -> Any:
    """A context with foldexp's own linear route off. The executor runs ops on CPU under
    ``routed_linears()`` (``kernels/dense.py``), a Python mode every torch call passes
    through: a loop makes a dozen small calls per iteration, where that costs as much as the
    iteration's work (the route pays off for large row counts; a loop's rows dwindle).
    ``F.linear`` then computes the same product torch's own way. Only that mode is stepped
    out of, when it is the innermost: a user's modes (``with torch.device(...)``, a profiler)
    and tensor subclasses still see the body's calls."""
    if not torch._C._is_torch_function_mode_enabled():
        return _NULL
    top = torch._C._get_function_stack_at(torch._C._len_torch_function_stack() - 1)
    if getattr(top, "foldexp_route", False):
        return torch.overrides._pop_mode_temporarily()
    return _NULL


_NULL = nullcontext()


def check_scalar_condition(owner: Block, what: str, t: Type) -> None:
    if not (
        isinstance(t, TensorType)
        and t.shape == ()
        and (t.dtype == torch.bool or t.dtype.is_floating_point)
    ):
        raise TypeError(
            f"{owner!r}: {what} must output a scalar bool (or a 0-d float read as > 0), got {t!r}"
        )


def check_state(owner: Block, t: Type) -> None:
    if not is_tensor_tree(t):
        raise TypeError(
            f"{owner!r}: a loop's state must be a tensor or a (nested) tuple of tensors, got {t!r}"
        )


#: A loop's ``max_iterations`` / ``max_length`` at most: counts are int64 tensors (10**30 had
#: passed, to fail deep inside a batch).
MAX_LOOP_LIMIT = 2**31 - 1


def check_limit(owner: str, name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LOOP_LIMIT:
        raise ValueError(
            f"{owner}: {name} must be an integer >= 1 and at most {MAX_LOOP_LIMIT}, "
            f"got {value!r:.40}"
        )
    return value


class LoopOp(Op):
    """The op of a loop: ``run(args) -> outputs`` over a batch of loop instances. Its parameters,
    randomness and hooks are those of the ops inside the loop's templates."""

    def __init__(self, owner: Block, run: Any, in_type: Type, out_type: Type, name: str) -> None:
        super().__init__(run, in_type, out_type, None, name)
        self.owner = owner
        self.runtime["fusion"] = _NoFusion()

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.runtime["fusion"] = _NoFusion()

    def forward(self, args: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        return self.fn(list(args))

    def inner_ops(self) -> list[Op]:
        return self.owner._inner_ops()

    def parameters(self) -> list[torch.nn.Parameter]:
        seen: dict[int, torch.nn.Parameter] = {}
        for op in self.inner_ops():
            for p in op.parameters():
                seen.setdefault(id(p), p)
        return list(seen.values())

    def is_random(self) -> bool:
        return any(op.is_random() for op in self.inner_ops())

    def has_forward_hooks(self) -> bool:
        return any(op.has_forward_hooks() for op in self.inner_ops())


def is_eager(tr: Tracer) -> bool:
    """Whether ``tr`` is the eager oracle's tracer (a loop then runs as plain Python)."""
    return isinstance(tr, EagerTracer)
