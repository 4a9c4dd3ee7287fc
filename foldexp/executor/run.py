"""Executing a plan: per depth, gather → one call per operation → write into the type buffers.

Each tensor type has one preallocated buffer holding every value of that type in the batch
(constants first, then each group's outputs). A group reads its arguments with one
``index_select`` (or a free slice) per type, runs its op once, and copies the results into its
reserved rows.

Gradients. Writing into shared buffers in place is invisible to autograd, so training runs the
whole depth loop inside one ``torch.autograd.Function``:

- forward: each gathered block (or, for a large one, each argument in it) becomes a fresh leaf,
  the op runs with grad enabled, and the group keeps its small local graph (inputs → outputs);
- backward: the value buffers, no longer read, are zeroed to hold the gradients, filled from the
  output gradients, then groups are visited from the deepest to the shallowest;
  ``torch.autograd.grad`` of each group's outputs gives its arguments' gradients, added into
  their rows one gather at a time (``index_add_parts``), and its parameters' gradients, summed
  and returned to the outer autograd. A ``Linear``'s weight
  gradient is not among them: its backward hands ``(x, dy)`` to the sweep's
  ``WeightGradients``, which sums every group's rows in a few large products at the end
  (``kernels/deferred.py``).

The tape. With ``device.compile`` on (``graphs``, ``inductor``; CUDA's default), a group whose op
has a capture keeps no graph at all: it runs the op's captured forward and its record holds what
the captured backward takes (``tape.py``, ``capture.py``); the backward calls that, so autograd's
engine runs once for the whole step. Groups of ops the tape refuses take the route above.

Dense layers. On CPUs where ``foldexp.kernels`` takes its oneDNN route, every op runs under
``routed_linears()``, so a user's plain ``nn.Linear`` takes that route as foldexp's own does.

Pointwise runs. Every op body is called through ``calls.call_op``: where foldexp's C++ kernels
are on, each run of pointwise torch ops in it (a user's gate arithmetic) runs as one generated
kernel (``kernels/pointwise_graph.py``), so a user's cell gets what foldexp's fused cells have.

Kept plans. A plan run again without gradients (a repeated request, served from the compiler's
plan cache) reuses its buffers and gathers into rows it keeps (``replay.py``).

This avoids the trap of gathering each depth from a growing concatenation of all earlier outputs,
where autograd materialises a full-size gradient per depth (O(nodes × depth) memory traffic).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from foldexp.blocks.internal import Op
from foldexp.compiler.schedule import Group, Plan
from foldexp.executor.calls import (
    allocate,
    arguments,
    call_op,
    dense_route,
    on_device,
    outputs,
    write_outputs,
)
from foldexp.executor.capture import capture_key, compile_mode, report_captures
from foldexp.executor.replay import run_kept
from foldexp.executor.tape import (
    TapeRecord,
    add_rows,
    gather_layouts,
    tape_backward,
    tape_forward,
)
from foldexp.kernels import WeightGradients, collecting_weight_gradients

__all__ = ["execute"]


def _engine_entry() -> Any:
    """autograd's engine entry point where this torch has it with the signature used here (tried
    once on a tiny graph), else ``None``: the public ``torch.autograd.grad`` then serves."""
    try:
        from torch.autograd.graph import _engine_run_backward as run

        x = torch.ones(2, requires_grad=True)
        with torch.enable_grad():
            y = x * 3.0
        (gx,) = run((y,), (torch.ones(2),), False, False, (x,), True, accumulate_grad=False)
        return run if torch.equal(gx, torch.full((2,), 3.0)) else None
    except Exception:  # noqa: BLE001  (a private function: any change sends us to the public one)
        return None


_engine_run_backward = _engine_entry()


def _run_no_grad(plan: Plan, ops: Sequence[Op], device: torch.device) -> list[torch.Tensor]:
    kept = run_kept(plan, ops, device)
    if kept is not None:
        return kept
    bufs = allocate(plan, device)
    with dense_route(device):
        for g in plan.groups:
            write_outputs(bufs, g.outs, call_op(ops[g.op], arguments(ops[g.op], g, bufs)))
    return outputs(plan, bufs)


class _Sweep:
    """State shared by the forward and backward of one differentiable execution."""

    def __init__(
        self, plan: Plan, ops: Sequence[Op], params: list[torch.Tensor], device: torch.device
    ) -> None:
        self.plan, self.ops, self.device = plan, ops, device
        self.pos = {id(p): i for i, p in enumerate(params)}
        self.op_all = [op.parameters() for op in ops]  # what a capture takes, frozen ones too
        self.op_params = [
            [(self.pos[id(p)], p) for p in ps if id(p) in self.pos] for ps in self.op_all
        ]
        self.n_params = len(params)
        self.weight_grads = WeightGradients(params)
        mode = self.mode = compile_mode(device.type)
        # Under autocast a captured graph would keep the casts (or lack of them) it was traced
        # with: autocast's steps run per group.
        autocast = torch.amp.is_autocast_available(device.type) and torch.is_autocast_enabled(
            device.type
        )
        self.tape = mode != "off" and not autocast
        # read only for the tape: the per-group route pays nothing for it
        self.keys = (
            [capture_key(op, ps, mode, device) for op, ps in zip(ops, self.op_all)]
            if self.tape
            else []
        )

    def forward(self) -> list[torch.Tensor]:
        plan = self.plan
        bufs = self.bufs = allocate(plan, self.device)
        self.records: list[Any] = []
        if self.tape:
            self._tape_forward(bufs)
            return outputs(plan, bufs)
        deferring = collecting_weight_gradients(self.weight_grads)
        with torch.enable_grad(), dense_route(self.device), deferring:
            for g in plan.groups:
                self.records.append(self._eager_group(self.ops[g.op], g, bufs))
        return outputs(plan, bufs)

    def _tape_forward(self, bufs: list[torch.Tensor]) -> None:
        """The forward on the tape: captured groups run without grad (nothing for autograd to
        record); the groups it refuses take their own graphs, under the dense route (each aten
        call of a captured graph would pass through its mode)."""
        plan = self.plan
        with torch.no_grad(), collecting_weight_gradients(None):
            for g, layout in zip(plan.groups, gather_layouts(plan)):
                op = self.ops[g.op]
                record = tape_forward(op, g, layout, bufs, self.op_all[g.op], self.keys[g.op])
                if record is None:
                    deferring = collecting_weight_gradients(self.weight_grads)
                    with torch.enable_grad(), dense_route(self.device), deferring:
                        record = self._eager_group(op, g, bufs)
                self.records.append(record)
        report_captures(self.mode)

    def _eager_group(self, op: Op, g: Group, bufs: list[torch.Tensor]) -> tuple[Any, ...]:
        """Runs one group with its own small autograd graph (inputs → outputs), kept for the
        backward."""
        leaves: list[torch.Tensor] = []
        spans: list[int] = []
        outs = call_op(op, arguments(op, g, bufs, leaves, spans))
        write_outputs(bufs, g.outs, [o.detach() for o in outs])
        return (leaves, spans, outs)

    def backward(self, grads: Sequence[torch.Tensor | None]) -> list[torch.Tensor | None]:
        plan, bufs = self.plan, self.bufs
        # The values' buffers hold their gradients now: nothing reads them again (outputs were
        # copied out, gathers are copies), and memory already touched zeroes several times
        # faster than a fresh allocation (peers step: 0.4 against 1.9-2.7 ms).
        # On the tape, saved tensors may be views of the values' buffers: fresh ones then.
        taped = any(isinstance(r, TapeRecord) for r in self.records)
        if taped and torch.is_grad_enabled():
            raise RuntimeError(
                "a second derivative (create_graph=True) through a foldexp execution needs the "
                "per-group route: set device.compile=off (set_compile_mode('off'))"
            )
        gbuf: list[torch.Tensor | None] = [
            (torch.zeros_like(b) if taped else b.zero_()) if b.dtype.is_floating_point else None
            for b in bufs
        ]
        targets = [(tid, rows) for tid, rows in plan.outputs]
        targets += [(tid, rows) for tid, rows, _ in plan.metrics.values()]
        for (tid, rows), g in zip(targets, grads):
            grad_buf = gbuf[tid]
            if g is not None and grad_buf is not None:
                add_rows(grad_buf, rows, [g])
        param_grads: list[torch.Tensor | None] = [None] * self.n_params
        owned: set[int] = set()  # param_grads this sweep allocated, so may add into in place
        # The forward's routes are open again so that a checkpointed op recomputes its forward
        # as it ran (the same saved tensors); the collector accepts rows only from this
        # backward, and none under create_graph (those gradients must stay differentiable).
        self.weight_grads.accepting = not torch.is_grad_enabled()
        try:
            collecting = collecting_weight_gradients(self.weight_grads)
            with dense_route(self.device), collecting:
                self._backward_groups(gbuf, param_grads, owned)
        finally:
            self.weight_grads.accepting = False
        for p, gp in self.weight_grads.gradients():
            _add_param_grad(param_grads, owned, self.pos[id(p)], gp)
        self.bufs = []
        return param_grads

    def _backward_groups(
        self,
        gbuf: list[torch.Tensor | None],
        param_grads: list[torch.Tensor | None],
        owned: set[int],
    ) -> None:
        """Visits the groups deepest first: each group's input gradients go into ``gbuf``,
        its parameters' into ``param_grads``."""
        plan = self.plan
        for gi in range(len(plan.groups) - 1, -1, -1):
            g = plan.groups[gi]
            record = self.records[gi]
            self.records[gi] = None  # free this group's graph as soon as it is used
            if isinstance(record, TapeRecord):
                for p, gp in zip(self.op_all[g.op], tape_backward(record, g, gbuf)):
                    if gp is not None and id(p) in self.pos:
                        _add_param_grad(param_grads, owned, self.pos[id(p)], gp)
                continue
            leaves, spans, outs = record
            pairs = [
                (o, gbuf[tid][s:e])
                for o, (tid, s, e) in zip(outs, g.outs)
                if o.requires_grad and gbuf[tid] is not None
            ]
            if not pairs:
                continue
            wrt_params = [(i, p) for i, p in self.op_params[g.op] if p.requires_grad]
            inputs = [*leaves, *(p for _, p in wrt_params)]
            if not inputs:
                continue
            res = _group_grads([o for o, _ in pairs], inputs, [gr for _, gr in pairs])
            k = 0
            for ga, span in zip(g.gathers, spans):
                if span:  # the gather's block, or each of its arguments
                    add_rows(gbuf[ga.tid], ga.rows, res[k : k + span])  # type: ignore[arg-type]
                    k += span
            for (i, _), gp in zip(wrt_params, res[len(leaves) :]):
                _add_param_grad(param_grads, owned, i, gp)


def _group_grads(
    outs: list[torch.Tensor], inputs: list[torch.Tensor], grads: list[torch.Tensor]
) -> tuple[torch.Tensor | None, ...]:
    """``torch.autograd.grad(outs, inputs, grads, allow_unused=True)``, straight into autograd's
    engine where torch has the entry point: the public call first converts every output gradient
    in Python (``_make_grads``), while these are buffer rows of the outputs' own shapes and
    dtypes, which the engine checks again itself. SST step 19.7-20.4 → 19.2-20.1 ms (three
    alternating pairs). Under ``create_graph`` (grad mode on) the public call keeps its checks."""
    if (
        _engine_run_backward is None
        or torch.is_grad_enabled()
        or any(o.shape != g.shape for o, g in zip(outs, grads))  # broadcast into its rows:
    ):  # the public call names the mismatch, as it always has
        return torch.autograd.grad(outs, inputs, grads, allow_unused=True)
    return _engine_run_backward(
        tuple(outs), tuple(grads), False, False, tuple(inputs), True, accumulate_grad=False
    )


def _add_param_grad(
    grads: list[torch.Tensor | None], owned: set[int], i: int, g: torch.Tensor | None
) -> None:
    """Adds one group's gradient of parameter ``i``. The first is kept as autograd gave it (it
    may alias another tensor, so it is never written); the first sum allocates a tensor that
    later groups add into in place, sparing a full-size allocation per group."""
    if g is None:
        return
    acc = grads[i]
    if acc is None:
        grads[i] = g
    elif i in owned:
        acc.add_(g)
    else:
        grads[i] = acc + g
        owned.add(i)


class _SweepFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, sweep: _Sweep, *params: torch.Tensor) -> tuple[torch.Tensor, ...]:
        ctx.sweep = sweep
        outs = sweep.forward()
        for o in outs:
            if not o.dtype.is_floating_point:
                ctx.mark_non_differentiable(o)
        return tuple(outs)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[Any, ...]:
        sweep: _Sweep = ctx.sweep
        if sweep is None:
            raise RuntimeError(
                "a foldexp execution can be backpropagated once (its buffers are freed by the "
                "first backward): run the plan again instead of retain_graph=True"
            )
        ctx.sweep = None
        return (None, *sweep.backward(grads))


def execute(
    plan: Plan, ops: Sequence[Op], params: list[torch.Tensor], device: torch.device
) -> list[torch.Tensor]:
    """Runs ``plan``; returns the output components, then the metrics, in plan order.

    Differentiable with respect to ``params`` (the compiled model's parameters) when grad mode
    is on and any of them requires a gradient.

    Raises:
        RuntimeError: the plan merged equal invocations of an op that is random now.
    """
    for i in plan.merged_ops:
        if ops[i].is_random():
            raise RuntimeError(
                f"the plan computed equal invocations of {ops[i].name} once, but that op is "
                "random now (a dropout in training mode?): build plans in the mode they run in, "
                "or compile with merge_duplicates=False"
            )
    plan = on_device(plan, device)
    trainable = [p for p in params if p.requires_grad]
    if torch.is_grad_enabled() and trainable:
        return list(_SweepFunction.apply(_Sweep(plan, ops, trainable, device), *trainable))
    return _run_no_grad(plan, ops, device)
