"""A dense layer's weight gradient from many small calls as a few large matrix products.

Why: dynamic batching calls a layer once per depth, so a Tree-LSTM cell's weight gradient is a
sum over depths of ``dyᵀ x`` with a few dozen rows each (SST: 17 calls of ≈ 50 rows per step).
Each small product still writes the whole ``(out, in)`` gradient, and autograd then adds it to
the running sum: at a few dozen rows that memory traffic costs more than the arithmetic. Here a
layer's backward computes only its input gradient and hands ``(x, dy)`` to a
``WeightGradients`` collector, which multiplies the rows it has gathered once it holds
``FLUSH_ROWS`` of them (and at the end): one product of hundreds of rows instead of dozens of
small ones, accumulated in place with ``addmm_`` (through oneDNN where the layer's products go
there: ``dense.py`` hands the collector its route).

The executor (``foldexp/executor/run.py``) opens a collector for the forward of each
differentiable sweep and asks it for the weight gradients when its backward has visited every
group. ``linear`` defers only inside that window, only for weights the collector was told about
(the sweep's trainable parameters), only for plain 2-D inputs and never under autocast; every
other call is unchanged. The collector takes rows only while the sweep's own backward runs
(``accepting``): any other backward through such a layer -- an op calling ``autograd.grad`` in
its forward, ``create_graph`` -- gets its weight gradient from the layer as autograd would give
it. Results equal autograd's to float rounding (the same products, summed in another order).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

__all__ = [
    "WeightGradients",
    "collecting_weight_gradients",
    "active_collector",
    "accumulate_product",
    "FLUSH_ROWS",
    "FLUSH_ROWS_GPU",
]

# Rows gathered before one product: ≥ 256 rows keep a (750, 300) weight gradient's product well
# above its output's memory traffic; larger ones only hold more rows in memory.
FLUSH_ROWS = 512
# On a GPU the product's cost is its launches (a product, the bias's sum, their additions into
# the running sums: 3-4 kernels and their host time each), not its memory traffic: a step's rows
# are multiplied at once (the peers' step: 17 products become 1; 28 launches fewer), unless they
# pass this many, which bounds the rows held and their concatenations (at hidden 512, 16,384 rows
# of a Tree-LSTM's x and dy: about 235 MB, twice that while concatenated).
FLUSH_ROWS_GPU = 1 << 14

_local = threading.local()


# ``product(acc, dy, x)``: ``acc + dyᵀ x``; ``dy`` may have more rows than ``x``, zeros.
Product = Callable[[torch.Tensor | None, torch.Tensor, torch.Tensor], torch.Tensor]


def accumulate_product(acc: torch.Tensor | None, dy: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``acc + dyᵀ x`` (``dyᵀ x`` when ``acc`` is ``None``), in place into ``acc``; rows of
    ``dy`` past ``x``'s (padding) are left out."""
    dy = dy[: x.shape[0]]
    return torch.mm(dy.t(), x) if acc is None else acc.addmm_(dy.t(), x)


class _Slot:
    """The pending ``(x, dy)`` rows and the running gradient sums of one layer's weight."""

    __slots__ = ("owner", "weight", "bias", "product", "xs", "dys", "rows", "grad_w", "grad_b")

    def __init__(
        self,
        owner: WeightGradients,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        product: Product,
    ) -> None:
        self.owner, self.weight, self.bias, self.product = owner, weight, bias, product
        self.xs: list[torch.Tensor] = []
        self.dys: list[torch.Tensor] = []
        self.rows = 0
        self.grad_w: torch.Tensor | None = None
        self.grad_b: torch.Tensor | None = None

    def add(self, x: torch.Tensor, dy: torch.Tensor, dy_read: torch.Tensor | None = None) -> None:
        """Takes one call's rows. ``dy_read``: ``dy`` as the layer's route read it for the input
        gradient (oneDNN pads rows), multiplied as it is when these rows make a product alone."""
        if dy_read is not None and not self.xs and x.shape[0] >= FLUSH_ROWS:
            self._multiply(x, dy_read, dy)  # alone: no concatenation, no second padding
            return
        self.xs.append(x)
        self.dys.append(dy)
        self.rows += x.shape[0]
        if self.rows >= (FLUSH_ROWS if x.device.type == "cpu" else FLUSH_ROWS_GPU):
            self.flush()

    def flush(self) -> None:
        if not self.xs:
            return
        x = self.xs[0] if len(self.xs) == 1 else torch.cat(self.xs)
        dy = self.dys[0] if len(self.dys) == 1 else torch.cat(self.dys)
        self.xs, self.dys, self.rows = [], [], 0
        self._multiply(x, dy, dy)

    def _multiply(self, x: torch.Tensor, dy: torch.Tensor, dy_rows: torch.Tensor) -> None:
        """Adds ``dyᵀ x`` to the weight's sum and ``dy_rows``' column sums to the bias's
        (``dy`` may carry zero rows of padding after ``x``'s, ``dy_rows`` is it without them)."""
        self.grad_w = self.product(self.grad_w, dy, x)
        if self.bias is not None and self.bias.requires_grad:
            db = dy_rows.sum(0)
            self.grad_b = db if self.grad_b is None else self.grad_b.add_(db)


class WeightGradients:
    """Collects the deferred weight gradients of the layers whose weights are in ``params``."""

    def __init__(self, params: list[torch.Tensor]) -> None:
        self._deferrable = {id(p) for p in params}
        self._slots: dict[int, _Slot] = {}
        # True only while the sweep's own backward runs (not create_graph): any other backward
        # through a deferred layer (autograd.grad inside an op, a stashed activation) gets its
        # weight gradient from autograd as usual.
        self.accepting = False

    def slot(
        self,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        product: Product = accumulate_product,
    ) -> _Slot | None:
        """The layer's slot, or ``None`` where its gradient must take autograd's usual path (a
        weight this collector was not given, or a bias it was not given beside one it was).
        ``product(acc, dy, x)`` adds ``dyᵀ x`` to ``acc`` by the layer's matmul route."""
        if id(weight) not in self._deferrable:
            return None
        if bias is not None and bias.requires_grad and id(bias) not in self._deferrable:
            return None
        key = id(weight)
        slot = self._slots.get(key)
        if slot is None or slot.bias is not bias:
            if slot is not None:  # one weight under two biases: keep autograd's path
                return None
            slot = self._slots[key] = _Slot(self, weight, bias, product)
        return slot

    def gradients(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Every ``(parameter, gradient)`` gathered, once the backward is over; empties it."""
        slots, self._slots = self._slots, {}
        for slot in slots.values():
            slot.flush()
            if slot.grad_w is not None:
                yield slot.weight, slot.grad_w
            if slot.grad_b is not None and slot.bias is not None:
                yield slot.bias, slot.grad_b


def active_collector() -> WeightGradients | None:
    """The collector of the sweep forward running in this thread, if any."""
    return getattr(_local, "collector", None)


@contextmanager
def collecting_weight_gradients(collector: WeightGradients | None) -> Iterator[None]:
    """Within this context, ``linear`` defers the weight gradients ``collector`` accepts."""
    old = active_collector()
    _local.collector = collector
    try:
        yield
    finally:
        _local.collector = old


class DeferredLinear(torch.autograd.Function):
    """``F.linear`` whose backward returns the input gradient and defers the weight's.

    The weight and bias are inputs, so the output requires a gradient whenever they do (even
    with an input that does not, as a frozen embedding's rows). In the sweep's own backward
    their gradients are ``None`` here and reach the parameters through the slot; in any other
    they are returned here. ``forward_fn(x, weight, bias)`` returns the product and ``x`` as
    its route read it (``dense._linear_value``: rows padded for oneDNN, else ``None``).
    """

    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        slot: _Slot,
        forward_fn: Any,
    ) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.slot, ctx.forward_fn = slot, forward_fn
        return forward_fn(x, weight, bias)[0]

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[Any, ...]:
        x, weight = ctx.saved_tensors
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        if torch.is_grad_enabled():  # create_graph: plain differentiable ops, nothing deferred
            return (
                dy.mm(weight) if need_x else None,
                dy.t().mm(x) if need_w else None,
                dy.sum(0) if need_b else None,
                None,
                None,
            )
        dx, dy_read = ctx.forward_fn(dy, weight.t(), None) if need_x else (None, None)
        slot = ctx.slot
        if slot.owner.accepting:
            slot.add(x, dy, dy_read)
            return dx, None, None, None, None
        return dx, dy.t().mm(x) if need_w else None, dy.sum(0) if need_b else None, None, None
