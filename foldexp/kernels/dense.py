"""Dense layers whose CPU matrix products run on oneDNN instead of MKL.

Why this exists: torch's CPU ``addmm``/``mm`` in float32 call MKL, which picks its kernels by CPU
*vendor*; on AMD processors it runs at AVX2 speed even where the CPU has AVX-512. oneDNN, which
torch ships as well (``torch.backends.mkldnn``), picks by CPU *features*. On the 2-core AMD EPYC
VM this project was first measured on (torch 2.13.0, 2 threads), a Tree-LSTM's gate matmul
((N, 256) by (256, 640)) ran at ≈ 175 GFLOP/s through ``addmm`` and ≈ 350-400 through oneDNN;
the input gradient gained as much, the weight gradient 1.6-2x (``benchmarks/onednn_linear.py``).
Matmuls are most of a Tree-LSTM step, so there this is the largest single speed-up the engine
has. (350-400 GFLOP/s on 2 cores takes full-width AVX-512 units: see "Which CPUs".)

``linear(x, weight, bias)`` computes ``F.linear(x, weight, bias)``. It takes the oneDNN route
only where that route exists and pays: a CPU float32 input of at least ``MIN_ROWS`` rows, and a
torch built with oneDNN. Everywhere else (CUDA, float64, a single row, torch without oneDNN) it
is ``F.linear`` itself. The oneDNN route is an ``autograd.Function`` whose backward makes one
oneDNN call for the input gradient and one for the weight gradient; it supports one level of
differentiation (a second ``backward`` through it raises), which is all training needs.

``Linear`` is ``nn.Linear`` with that forward: same parameters, same ``state_dict`` keys, so
checkpoints move freely between the two.

Shapes. oneDNN compiles a kernel for every shape it meets (≈ 1 ms each) and caches it. A dynamic
batch has a new row count at nearly every depth of every batch, so unpadded, SST training spent
its time compiling (epochs 12.7-13.9 s against 8.4-10.0 with MKL) and grew to 1.2-1.8 GB RSS
(609 MB with MKL). Rows are therefore padded with zeros up to one of 8 sizes per octave
(``padded_rows``: at most 12.5% more rows): a few dozen shapes per layer, compiled once, then
cache hits for the rest of the run; SST training then peaks at 670-690 MB RSS. oneDNN's caches
keep their default size (1024 shapes; ``ONEDNN_PRIMITIVE_CACHE_CAPACITY`` and torch's
``LRU_CACHE_CAPACITY`` change it): capped at 256 they made no difference to SST's memory, and
Table 1's grid of cases, whose shapes all differ, then evicted its own kernels.
``python benchmarks/onednn_linear.py --vary LO HI`` measures a new row count at every call.

Which CPUs. MKL's vendor dispatch is the whole reason for this route, and it costs only where the
CPU's AVX-512 is full width: on AMD's Zen 5 (CPU family 26 and later) MKL's AVX2 kernels run at
half the CPU's rate, on Zen 4 (family 25, AVX-512 executed as two 256-bit halves) they already run
at its full rate. The route is therefore on by default only on AMD CPUs of family 26 or later (Zen
5's laptop parts split AVX-512 into 256-bit halves as Zen 4 does: there ``device.onednn=false`` is
likely faster). On a 2-core AMD EPYC of family 25 (Zen 4), the gate layer ran at 180-200 GFLOP/s
both ways, oneDNN's weight gradient 0.8-0.9x MKL's, and the padding copies made the peers'
Tree-LSTM step 1,490-1,680 trees/s through oneDNN against 1,680-1,890 through MKL (SST's epoch
8.3-8.7 against 6.5-7.5 s); on a 2-core Intel Xeon (AVX-512) 1,264 against 1,501.
``set_onednn_enabled(True/False)`` (``device.onednn``) overrides the choice; ``None`` restores it.

Layers foldexp did not write. ``routed_linears()`` is a ``TorchFunctionMode`` under which every
``torch.nn.functional.linear`` call -- a user's plain ``nn.Linear`` included -- goes through
``linear``; the executor runs its ops under it while the route is on, so a user's cell gains the
same as foldexp's own ``Linear``.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable
from torch.overrides import TorchFunctionMode

from foldexp.kernels.deferred import DeferredLinear, accumulate_product, active_collector
from foldexp.kernels.native import cpu_vendor_family, transforms_active

__all__ = [
    "Linear",
    "cpu_vendor_family",
    "linear",
    "onednn_available",
    "onednn_enabled",
    "set_onednn_enabled",
    "routed_linears",
    "padded_rows",
    "MIN_ROWS",
]

# Below this many rows a layer is cheap and the fixed costs (oneDNN ≈ 20 µs a call, plus the
# Python autograd.Function) exceed what oneDNN saves: the measured break-even lies between 32
# and 64 rows (layer 256 -> 640, 2 threads, `benchmarks/onednn_linear.py`).
MIN_ROWS = 48

_AVAILABLE = bool(
    torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
)


# AMD's first family whose AVX-512 units are full width (Zen 5), where oneDNN pays.
FULL_WIDTH_AMD_FAMILY = 26


def _pays_here() -> bool:
    """Whether the route is worth taking on this CPU: an AMD CPU of a full-width AVX-512
    family, which MKL runs at AVX2 speed."""
    vendor, family = cpu_vendor_family()
    return vendor == "AuthenticAMD" and family >= FULL_WIDTH_AMD_FAMILY


_enabled = _AVAILABLE and _pays_here()


def onednn_available() -> bool:
    """Whether this torch has the oneDNN route at all."""
    return _AVAILABLE


def onednn_enabled() -> bool:
    """Whether ``linear`` takes the oneDNN route (available, and chosen or paying here)."""
    return _enabled


def set_onednn_enabled(enabled: bool | None) -> bool:
    """Switches the oneDNN route on or off (for A/B measurements and tests), or back to this
    CPU's default with ``None``; returns the old setting. Switching it on where torch has no
    oneDNN leaves it off."""
    global _enabled
    choice = _pays_here() if enabled is None else bool(enabled)
    old, _enabled = _enabled, choice and _AVAILABLE
    return old


def _mm(a: torch.Tensor, b_t: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``a @ b_t.T + bias`` in one oneDNN call (both operands may be transposed views)."""
    return torch.ops.mkldnn._linear_pointwise(a, b_t, bias, "none", [], "")


def _plain_2d(t: torch.Tensor) -> torch.Tensor:
    """``t`` itself when it is row- or column-major, else a contiguous copy (oneDNN describes
    both layouts without copying; other strides, like expanded zeros, it would not)."""
    if t.is_contiguous() or t.t().is_contiguous():
        return t
    return t.contiguous()


def padded_rows(n: int) -> int:
    """``n`` rounded up to one of 8 row counts per octave (≤ 12.5% padding, at least 8 rows)."""
    step = max(8, 1 << max(0, n.bit_length() - 4))
    return -(-n // step) * step


def _pad_rows(t: torch.Tensor, rows: int) -> torch.Tensor:
    """``t`` with zero rows appended up to ``rows`` (``t`` itself, plain, when it has them)."""
    if t.shape[0] == rows:
        return _plain_2d(t)
    out = t.new_empty(rows, t.shape[1])
    out[: t.shape[0]] = t
    out[t.shape[0] :].zero_()
    return out


class _OneDnnLinear(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
    ) -> torch.Tensor:
        n = x.shape[0]
        x, weight = _pad_rows(x, padded_rows(n)), _plain_2d(weight)
        ctx.save_for_backward(x, weight)
        ctx.rows, ctx.has_bias = n, bias is not None
        return _mm(x, weight, bias)[:n]

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, weight = ctx.saved_tensors  # x padded; the padding's zero gradient rows add nothing
        n = ctx.rows
        dy_padded = _pad_rows(dy, x.shape[0])
        dx = dw = db = None
        if ctx.needs_input_grad[0]:
            dx = _mm(dy_padded, weight.t(), None)[:n]
        if ctx.needs_input_grad[1]:
            # (xᵀ dy)ᵀ: oneDNN runs this orientation ≈ 1.4x faster than dyᵀ x.
            dw = _mm(x.t(), dy_padded.t(), None).t()
        if ctx.has_bias and ctx.needs_input_grad[2]:
            db = dy.sum(0)
        return dx, dw, db


def _use_onednn(x: torch.Tensor, weight: torch.Tensor) -> bool:
    return (
        _enabled
        and x.dim() == 2
        # A tracer records the padding as constants and warns on the row count: torch's route.
        and not transforms_active()
        and x.shape[0] >= MIN_ROWS
        and x.dtype == torch.float32
        and weight.dtype == torch.float32
        and x.device.type == "cpu"
        and weight.device.type == "cpu"
        and x.layout == torch.strided
    )


def _linear_value(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``F.linear``'s value by the faster route, recording nothing for autograd; and ``x`` as
    the route read it (rows padded for oneDNN, ``None`` for torch's own route): the input
    gradient's ``dy`` so read serves the deferred weight product without padding it anew."""
    if _use_onednn(x, weight):
        read = _pad_rows(x, padded_rows(x.shape[0]))
        return _mm(read, _plain_2d(weight), bias)[: x.shape[0]], read
    return F.linear(x, weight, bias), None


def _weight_product(acc: torch.Tensor | None, dy: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``acc + dyᵀ x`` for a deferred weight gradient, through oneDNN where the route is on (as
    ``_OneDnnLinear``'s backward computes it, rows padded so shapes compile once; a ``dy``
    padded already, as ``_linear_value`` read it, is not copied again)."""
    if not _use_onednn(x, dy):
        return accumulate_product(acc, dy, x)
    rows = padded_rows(x.shape[0])
    grad = _mm(_pad_rows(x, rows).t(), _pad_rows(dy, rows).t(), None).t()
    return grad if acc is None else acc.add_(grad)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)``, through oneDNN where that is faster (see the module doc);
    inside an executor's sweep, with the weight gradient deferred (``deferred.py``)."""
    collector = active_collector()
    if (
        collector is not None
        and x.dim() == 2
        and x.layout == torch.strided
        and weight.requires_grad
        and torch.is_grad_enabled()
        and not (
            torch.amp.is_autocast_available(x.device.type)  # ``meta`` has none to ask about
            and torch.is_autocast_enabled(x.device.type)
        )
    ):
        slot = collector.slot(weight, bias, _weight_product)
        if slot is not None:
            return DeferredLinear.apply(x, weight, bias, slot, _linear_value)
    if _use_onednn(x, weight):
        return _OneDnnLinear.apply(x, weight, bias)
    return F.linear(x, weight, bias)


class Linear(nn.Linear):
    """``nn.Linear`` whose forward is ``linear``: the same parameters and ``state_dict``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)


class _LinearRoute(TorchFunctionMode):
    """Sends every ``F.linear`` call to ``linear``; every other call through unchanged."""

    #: Marks foldexp's own route, which code below the kernels may step out of (a loop's
    #: small calls) without knowing this class; a user's modes carry no such mark.
    foldexp_route = True

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func is F.linear:
            # The mode is off while its handler runs, so ``linear``'s own calls go straight
            # to torch.
            return linear(*args, **kwargs)
        return func(*args, **kwargs)


def routed_linears() -> AbstractContextManager:
    """A context in which any ``nn.Linear`` (any ``F.linear`` call) takes ``linear``'s route;
    a no-op context while the route is off, so nothing is paid for it then."""
    return _LinearRoute() if _enabled else nullcontext()
