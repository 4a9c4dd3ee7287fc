"""Loops whose length depends on computed values: ``While`` and ``Unfold``.

Every other loop in a model follows the input's structure, known before anything runs. These
two stop on a tensor the model computes, so the compiler cannot unroll them while tracing:

- ``While(cond, body, max_iterations)`` traces as ONE invocation of a loop op (``LoopOp``).
  The scheduler batches the loop instances it reaches at one depth (across the batch's inputs,
  a ``Map``'s elements, a tree's nodes) into one call; that call runs every iteration as one
  batched call of ``cond`` and one of ``body`` over the instances still active, reading the
  condition on the host once per iteration, and drops the instances whose condition turned
  false (compaction), so its work follows the iterations each instance really takes.
  ``cond`` and ``body`` run from a *template*: their blocks traced once on placeholder values
  (a loop's state is a tensor or a tuple of tensors, so every instance traces alike), replayed
  op by op on the active rows. Everything is plain torch (``index_select``, ``cat``), so the
  executor's per-group ``autograd.grad`` reaches every iteration's parameters and the loop's
  input; ``cond`` runs without gradients.
- ``Unfold(step, max_length)`` outputs a sequence whose length is computed: the compiler builds
  the plan in stages (``foldexp/executor/loops.py``). An occurrence whose length is not known
  yet records a *probe* (a ``LoopOp`` running ``step`` until ``stop``, without gradients, that
  outputs the count) and traces as an empty sequence; once the probes have run, the batch is
  traced again with every length known, each ``Unfold`` as that many ``step`` invocations — an
  ordinary plan, batched by depth, differentiable like any other — and their ``stop`` values
  are checked against the lengths used.

Eagerly (``Block.eval``, the oracle) both are plain Python loops over ``run_steps``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import nullcontext
from typing import Any

import torch

from foldexp.blocks._base import Block, Tracer, convert_to_block
from foldexp.blocks._loop_ops import (
    LoopOp,
    Template,
    check_limit,
    check_scalar_condition,
    check_state,
    is_eager,
    partition,
    plain_torch,
    truth,
)
from foldexp.blocks._ops import Op, structure_builder, structure_flattener
from foldexp.types import SequenceType, TensorType, TupleType, Type, flatten_tensor_types

__all__ = [
    "While", "Unfold", "UnfoldLengths", "PROBE_METRIC", "STOP_METRIC", "contains_unfold",
    "loop_cap_fraction", "loop_blocks",
]  # fmt: skip

# Internal metric names (a NUL no user name starts with): the probes' counts and the stop
# values of unrolled ``Unfold`` occurrences, read by the staged executor and then dropped.
_NULL = nullcontext()  # a context that does nothing (reusable)

PROBE_METRIC = "\x00unfold.probe"
STOP_METRIC = "\x00unfold.stop."


class While(Block):
    """``x = input; n = 0; while n < max_iterations and cond(x): x = body(x); n += 1``.

    ``cond``: the state → a scalar bool (or a 0-d float, read as ``> 0``); ``body``: the state →
    a state of the same type; the state is a tensor or a (nested) tuple of tensors. With
    ``count`` the output is ``(state, n)``, ``n`` an int64 scalar. Reaching ``max_iterations``
    is not an error; every instance's count is recorded as the metric ``"<name>.iterations"``
    (``name`` defaults to ``While``), so ``Compiler.last_metrics`` tells how many hit the cap
    (``loop_cap_fraction``; not for a loop inside another loop's body). ``cond`` is not
    differentiated; ``body`` is, through every iteration, into its parameters and the loop's
    input.
    """

    def __init__(
        self,
        cond: Any,
        body: Any,
        max_iterations: int,
        count: bool = False,
        name: str | None = None,
    ) -> None:
        super().__init__(name=name)
        self.cond = convert_to_block(cond)
        self.body = convert_to_block(body)
        self.max_iterations = max_iterations
        check_limit(repr(self), "max_iterations", max_iterations)
        self.count = bool(count)
        self.metric_name = f"{name or 'While'}.iterations"
        self.op: LoopOp | None = None
        self._templates: tuple[Template, Template] | None = None

    def children(self) -> list[Block]:
        return [self.cond, self.body]

    def _infer(self, input_type: Type) -> Type:
        check_state(self, input_type)
        _no_unfold_inside(self, self.cond, self.body)
        check_scalar_condition(self, "cond", self.cond.infer(input_type))
        out = self.body.infer(input_type)
        if out != input_type:
            raise TypeError(
                f"{self!r}: body must output the state's type {input_type!r}, outputs {out!r}"
            )
        n = TensorType((), torch.int64)
        self._flatten = structure_flattener(input_type)
        self._build = structure_builder(input_type)
        self.op = LoopOp(
            self, self._run, input_type, TupleType(*flatten_tensor_types(input_type), n),
            f"While[{self.name or id(self)}]",
        )  # fmt: skip
        return TupleType(input_type, n) if self.count else input_type

    def _inner_ops(self) -> list[Op]:
        cond, body = self._get_templates()
        return list({id(op): op for op in (*cond.ops, *body.ops)}.values())

    def _get_templates(self) -> tuple[Template, Template]:
        if self._templates is None:
            t = self.input_type
            self._templates = (
                Template(self, self.cond, t, self.cond.output_type),
                Template(self, self.body, t, t),
            )
        return self._templates

    def _run(self, args: list[torch.Tensor]) -> list[torch.Tensor]:
        """The batched loop over ``len(args[0])`` instances (see the module docstring)."""
        cond, body = self._get_templates()
        with plain_torch():
            return self._loop(cond, body, list(args))

    def _loop(
        self, cond: Template, body: Template, state: list[torch.Tensor]
    ) -> list[torch.Tensor]:
        """Per iteration: ``cond`` on the active rows, ONE host read (how many stay), and only
        when some leave a partition and a gather; then ``body`` on the rows that stay. The
        instances that left are put back in order once, at the end."""
        n, device = state[0].shape[0], state[0].device
        cond_grad = torch.no_grad() if cond.steps else _NULL  # a GetItem runs nothing
        active: torch.Tensor | None = None  # None: all n rows, in order (nothing left yet)
        left: list[tuple[torch.Tensor, list[torch.Tensor], int]] = []  # (rows, state, count)
        for it in range(self.max_iterations):
            with cond_grad:
                keep = truth(self, cond.run(state)[0])
            n_keep = int(keep.sum())  # the iteration's one host read
            if n_keep < keep.shape[0]:
                stay, leave = partition(keep, n_keep)
                rows = leave if active is None else active.index_select(0, leave)
                left.append((rows, [s.index_select(0, leave) for s in state], it))
                if n_keep == 0:
                    return _unpermute(left, n, device)
                active = stay if active is None else active.index_select(0, stay)
                state = [s.index_select(0, stay) for s in state]
            state = body.run(state)
        full = torch.full((n,), self.max_iterations, dtype=torch.int64, device=device)
        if active is None:  # every instance ran to the limit: nothing to reorder
            return [*state, full]
        left.append((active, state, self.max_iterations))
        return _unpermute(left, n, device)

    def _trace(self, tr: Tracer, x: Any) -> Any:
        if is_eager(tr):
            return self._eager(tr, x)
        outs = tr.apply(self.op, self._flatten(x))  # type: ignore[arg-type]
        count = outs[-1]
        if getattr(tr, "records_loop_counts", True):
            tr.metric(self.metric_name, count)
        state = self._build(list(outs[:-1]))
        return (state, count) if self.count else state

    def _eager(self, tr: Tracer, x: Any) -> Any:
        from foldexp.blocks._steps import run_steps

        n = 0
        while n < self.max_iterations:
            with torch.no_grad():
                c = run_steps(self.cond, tr, x)
            if not bool(truth(self, c)[0]):
                break
            x = run_steps(self.body, tr, x)
            n += 1
        count = tr.constant(TensorType((), torch.int64), n)
        tr.metric(self.metric_name, count)
        return (x, count) if self.count else x

    def _repr_args(self) -> str:
        return f"{self.cond!r}, {self.body!r}, max_iterations={self.max_iterations}"


def _unpermute(
    left: list[tuple[torch.Tensor, list[torch.Tensor], int]], n: int, device: torch.device
) -> list[torch.Tensor]:
    """The pieces of every output (instances grouped by when they left: their rows, their
    states, their count) back in instance order, then the counts: one ``cat`` and one
    ``index_select`` per output, both differentiable."""
    order = torch.cat([rows for rows, _, _ in left])
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(n, device=order.device)
    outs = [torch.cat(parts).index_select(0, inverse) for parts in zip(*(v for _, v, _ in left))]
    sizes = torch.tensor([rows.shape[0] for rows, _, _ in left])
    counts = torch.tensor([c for _, _, c in left]).repeat_interleave(sizes)
    return [*outs, counts.to(device).index_select(0, inverse)]


class UnfoldLengths:
    """What the staged compiler tells ``Unfold`` while it traces: the lengths known so far,
    keyed by ``(input, occurrence)``, and what each input's trace recorded."""

    def __init__(self, known: dict[tuple[int, int], int]) -> None:
        self.known = known
        self.input = 0
        self._next = 0
        self.probes: dict[int, list[tuple[int, int]]] = {}
        self.unrolled: dict[int, list[tuple[tuple[int, int], int, Unfold]]] = {}

    def begin_input(self, k: int) -> None:
        """Starts (or restarts, after a rollback) input ``k``'s trace."""
        self.input, self._next = k, 0
        self.probes[k] = []
        self.unrolled[k] = []

    def next_key(self) -> tuple[int, int]:
        self._next += 1
        return self.input, self._next - 1


class Unfold(Block):
    """A sequence of computed length: ``step: T → (T, Y, stop)`` runs on the state and emits
    its ``Y`` every iteration; the iteration whose ``stop`` is true (a scalar bool, or a 0-d
    float read as ``> 0``) is the last, and at most ``max_length`` run. Outputs
    ``SequenceType(Y)``, which any sequence block downstream consumes. ``T`` and ``Y`` are
    tensors or (nested) tuples of tensors. ``stop`` is not differentiated; the elements are,
    through every step, into ``step``'s parameters and the initial state.
    """

    def __init__(self, step: Any, max_length: int, name: str | None = None) -> None:
        super().__init__(name=name)
        self.step = convert_to_block(step)
        self.max_length = max_length
        check_limit(repr(self), "max_length", max_length)
        self.op: LoopOp | None = None
        self._template: Template | None = None

    def children(self) -> list[Block]:
        return [self.step]

    def _infer(self, input_type: Type) -> Type:
        check_state(self, input_type)
        _no_unfold_inside(self, self.step)
        out = self.step.infer(input_type)
        _no_randomness_inside(self, self.step)  # (its ops are bound by infer)
        if not (isinstance(out, TupleType) and len(out.items) == 3):
            raise TypeError(
                f"{self!r}: step must output a tuple (state, element, stop), outputs {out!r}"
            )
        state, elem, stop = out.items
        if state != input_type:
            raise TypeError(
                f"{self!r}: step's new state must have the state's type {input_type!r}, "
                f"has {state!r}"
            )
        check_state(self, elem)
        check_scalar_condition(self, "step's stop", stop)
        self._flatten = structure_flattener(input_type)
        self._n_state = len(flatten_tensor_types(input_type))
        self._n_elem = len(flatten_tensor_types(elem))
        self.op = LoopOp(
            self, self._probe, input_type, TensorType((), torch.int64),
            f"Unfold[{self.name or id(self)}].probe",
        )  # fmt: skip
        return SequenceType(elem)

    def _inner_ops(self) -> list[Op]:
        return self._get_template().ops

    def _get_template(self) -> Template:
        if self._template is None:
            self._template = Template(
                self,
                self.step,
                self.input_type,
                self.step.output_type,  # type: ignore[arg-type]
            )
        return self._template

    def _probe(self, args: list[torch.Tensor]) -> list[torch.Tensor]:
        """Each instance's length: ``step`` on the active rows until ``stop``, no gradients."""
        step = self._get_template()
        n, device = args[0].shape[0], args[0].device
        counts = torch.full((n,), self.max_length, dtype=torch.int64, device=device)
        active, state = torch.arange(n, device=device), list(args)
        with torch.no_grad(), plain_torch():
            for it in range(self.max_length - 1):
                out = step.run(state)
                stop = truth(self, out[-1])
                ends = torch.where(stop, it + 1, counts.index_select(0, active))
                counts.index_copy_(0, active, ends)
                n_go = stop.shape[0] - int(stop.sum())  # the iteration's one host read
                if n_go == 0:
                    break
                state = out[: self._n_state]
                if n_go < stop.shape[0]:
                    go, _ = partition(stop.logical_not(), n_go)
                    active = active.index_select(0, go)
                    state = [s.index_select(0, go) for s in state]
        return [counts]

    def _trace(self, tr: Tracer, x: Any) -> Any:
        if is_eager(tr):
            return self._eager(tr, x)
        ctx: UnfoldLengths | None = getattr(tr, "unfold_lengths", None)
        if ctx is None:
            if hasattr(tr, "op_index"):  # the compiler's own trace: only staged
                raise RuntimeError(f"{self!r} traced without the staged compiler's lengths")
            return []  # a tracer that only checks the input
        key = ctx.next_key()
        length = ctx.known.get(key)
        if length is None:
            tr.metric(PROBE_METRIC, tr.apply(self.op, self._flatten(x))[0])  # type: ignore[arg-type]
            ctx.probes[ctx.input].append(key)
            return []  # traced again once the probe has run
        ys = []
        for _ in range(length):
            x, y, stop = self.step._trace(tr, x)
            tr.metric(STOP_METRIC + str(self.step.output_type.items[2].dtype), stop)
            ys.append(y)
        ctx.unrolled[ctx.input].append((key, length, self))
        return ys

    def _eager(self, tr: Tracer, x: Any) -> Any:
        from foldexp.blocks._steps import run_steps

        ys = []
        for _ in range(self.max_length):
            x, y, stop = run_steps(self.step, tr, x)
            ys.append(y)
            if bool(truth(self, stop)[0]):
                break
        return ys

    def _repr_args(self) -> str:
        return f"{self.step!r}, max_length={self.max_length}"


def _no_unfold_inside(owner: Block, *blocks: Block) -> None:
    """A loop's templates run without the staged compiler: an ``Unfold`` cannot be in them."""
    if any(contains_unfold(b) for b in blocks):
        raise TypeError(
            f"{owner!r}: an Unfold inside a loop's cond, body or step is not supported (its "
            "length would be needed at every iteration); unfold after the loop instead"
        )


def _no_randomness_inside(owner: Block, step: Block) -> None:
    """Refuses a step drawing random numbers: the length probe and the unrolled steps differ."""
    for b in _reachable(step):
        op = getattr(b, "op", None)
        randoms = op._walk()[1] if isinstance(op, Op) else []
        if isinstance(op, Op) and (op.random or any(getattr(m, "p", 1) > 0 for m in randoms)):
            raise TypeError(
                f"{owner!r}: its step {b!r} draws random numbers (dropout, or an op declared "
                "random), which its length probe and unrolled steps would draw apart; apply "
                "dropout before or after the Unfold"
            )


def _reachable(root: Block) -> Iterator[Block]:
    """Every block reachable from ``root``, each once."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        b = stack.pop()
        if id(b) not in seen:
            seen.add(id(b))
            yield b
            stack.extend(b.children())


def contains_unfold(root: Block) -> bool:
    """Whether an ``Unfold`` is reachable from ``root`` (its plans are then built in stages)."""
    return any(isinstance(b, Unfold) for b in _reachable(root))


def loop_blocks(root: Block) -> list[While | Unfold]:
    """The ``While`` and ``Unfold`` blocks reachable from ``root``, each once."""
    return [b for b in _reachable(root) if isinstance(b, (While, Unfold))]


def loop_cap_fraction(
    metrics: dict[str, tuple[torch.Tensor, torch.Tensor]], block: While
) -> tuple[int, int]:
    """``(instances that hit max_iterations, instances)`` of ``block`` in a batch's metrics."""
    counts = metrics.get(block.metric_name)
    if counts is None:
        return 0, 0
    values = counts[0]
    return int((values >= block.max_iterations).sum()), int(values.numel())
