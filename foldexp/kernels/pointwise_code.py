"""One C++ loop for a run of a user's pointwise tensor ops, forward and backward.

A ``Region`` is straight-line arithmetic on equally shaped ``(n, H)`` float32 values: sums,
differences, products, quotients, negation, sigmoid, tanh, relu and exp, of the region's
inputs and of constants. Torch runs each such op as its own pass over memory (a user's Tree-LSTM
update is about 15 kernels forward and 20 backward); here the whole region is one loop over the
rows, generated from the region, compiled once per region by ``native.build_and_open`` (cached
on disk, digest in the file name) and called through ctypes. The backward recomputes the
forward's values from the inputs and sums each value's gradient in reverse order, as
``fused_cells.cpp`` does for foldexp's own cells.

An input is a column block of a source tensor (``Leaf``): a ``chunk`` of a layer's output is
read where it lies, and its gradient is written into one ``(n, C)`` tensor, so neither the
forward's slices nor the backward's concatenation of the pieces' gradients is a pass of its own.

A bias row (``(H,)`` or ``(1, H)``) added over the rows is a source read with a row stride of 0;
torch sums its gradient over the rows.

``RegionCall`` runs a region: the kernel when the sources are float32 CPU tensors of the shapes
the region was made for and no torch transform is active, else the same ops in torch
(``run_in_torch``), which is also the backward under ``create_graph``.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from foldexp.kernels.native import (
    FLAGS,
    HEADER,
    build_and_open,
    fused_cells_enabled,
    kernel_cache_dir,
    private_dir,
    transforms_active,
)

__all__ = ["Const", "Leaf", "Instr", "Region", "RegionCall", "cpp_source", "run_in_torch"]

log = logging.getLogger(__name__)

UNARY = {"sigmoid", "tanh", "relu", "exp", "neg"}
BINARY = {"add", "sub", "mul", "div"}
_PARALLEL_ELEMENTS = 16384  # as fused_cells.cpp: below this, waking threads costs more


@dataclass(frozen=True)
class Const:
    """A finite number in an instruction (a Python scalar in the user's code)."""

    value: float


@dataclass(frozen=True)
class Leaf:
    """An input value: columns ``[offset, offset + H)`` of source tensor ``source``."""

    source: int
    offset: int


@dataclass(frozen=True)
class Instr:
    """``op`` of ``args``: value indices (leaves first, then instructions) or constants."""

    op: str
    args: tuple[int | Const, ...]


@dataclass(frozen=True)
class Region:
    """Straight-line pointwise code on ``(n, width)`` values; ``outputs`` are value indices."""

    width: int
    source_widths: tuple[int, ...]
    leaves: tuple[Leaf, ...]
    instrs: tuple[Instr, ...]
    outputs: tuple[int, ...]
    # Sources that are one row (a bias of shape (H,) or (1, H)) broadcast over the others' rows:
    # expanded before the call, read with a row stride of 0, their gradient summed by torch.
    row_sources: tuple[bool, ...] = ()


def _value_code(op: str, a: str, b: str = "") -> str:
    return {
        "add": f"{a} + {b}",
        "sub": f"{a} - {b}",
        "mul": f"{a} * {b}",
        "div": f"{a} / {b}",
        "neg": f"-{a}",
        "sigmoid": f"sigmoid_f({a})",
        "tanh": f"tanh_f({a})",
        "relu": f"({a} < 0.0f ? 0.0f : {a})",  # NaN stays NaN, as torch.relu
        # exp_f saturates at ±88.38; torch's overflows to inf and underflows to (nearly) 0
        "exp": f"({a} > 88.7228f ? INFINITY : {a} < -88.3763f ? 0.0f : exp_f({a}))",
    }[op]


def _adjoint_code(op: str, y: str, a: str, b: str, gy: str) -> tuple[str | None, str | None]:
    """The gradient parts for ``op``'s arguments ``a``, ``b`` given its value ``y``."""
    return {
        "add": (gy, gy),
        "sub": (gy, f"-{gy}"),
        "mul": (f"{gy} * {b}", f"{gy} * {a}"),
        "div": (f"{gy} / {b}", f"-{gy} * {y} / {b}"),
        "neg": (f"-{gy}", None),
        "sigmoid": (f"{gy} * {y} * (1.0f - {y})", None),
        "tanh": (f"{gy} * (1.0f - {y} * {y})", None),
        "relu": (f"({a} > 0.0f ? {gy} : 0.0f)", None),
        "exp": (f"{gy} * {y}", None),
    }[op]


def _operand(region: Region, arg: int | Const) -> str:
    if isinstance(arg, Const):
        return f"{float(arg.value)!r}f"  # finite (see Const)
    if arg < len(region.leaves):
        # Loaded where used: GCC vectorizes a loop that loads every input first into a
        # variable about 3x slower (a user's Tree-LSTM update, 5,476 x 128: 6.8 against 2.2 ms).
        leaf = region.leaves[arg]
        return f"s{leaf.source}[{leaf.offset} + j]"
    return f"v{arg}"


def _forward_values(region: Region) -> list[str]:
    lines = []
    base = len(region.leaves)
    for k, ins in enumerate(region.instrs):
        expr = _value_code(ins.op, *(_operand(region, a) for a in ins.args))
        lines.append(f"const float v{base + k} = {expr};")
    return lines


def _row_pointers(region: Region, extra: list[str]) -> list[str]:
    srcs = [f"const float* s{s} = src{s} + r * ld{s};" for s in range(len(region.source_widths))]
    return srcs + extra


def _loop(region: Region, name: str, params: str, setup: list[str], rows: list[str],
          body: list[str]) -> str:  # fmt: skip
    ind = "\n" + " " * 8
    return "\n".join([
        f'extern "C" void {name}(int64_t n, {params}) {{',
        *("  " + line for line in setup),
        "#pragma omp parallel for schedule(static) if (n * H > kParallel)",
        "  for (int64_t r = 0; r < n; ++r) {",
        *("    " + line for line in rows),
        "#pragma omp simd",
        "    for (int64_t j = 0; j < H; ++j) {" + ind + ind.join(body),
        "    }",
        "  }",
        "}",
    ])  # fmt: skip


def _source_setup(region: Region) -> list[str]:
    lines = []
    for s in range(len(region.source_widths)):
        lines += [f"const float* src{s} = src[{s}];", f"const int64_t ld{s} = ld[{s}];"]
    return lines


def _forward_function(region: Region) -> str:
    n_out = len(region.outputs)
    setup = _source_setup(region) + [f"float* out{m} = out[{m}];" for m in range(n_out)]
    rows = _row_pointers(region, [f"float* o{m} = out{m} + r * H;" for m in range(n_out)])
    body = _forward_values(region)
    body += [f"o{m}[j] = v{v};" for m, v in enumerate(region.outputs)]
    params = "const float* const* src, const int64_t* ld, float* const* out"
    return _loop(region, "pointwise_forward", params, setup, rows, body)


def _backward_body(region: Region) -> list[str]:
    n_values = len(region.leaves) + len(region.instrs)
    body = _forward_values(region)
    body += [f"float a{k} = 0.0f;" for k in range(n_values)]
    body += [f"a{v} += go{m}[j];" for m, v in enumerate(region.outputs)]
    base = len(region.leaves)
    for k in range(len(region.instrs) - 1, -1, -1):
        ins = region.instrs[k]
        names = [*(_operand(region, a) for a in ins.args), ""][:2]
        parts = _adjoint_code(ins.op, f"v{base + k}", names[0], names[1], f"a{base + k}")
        for arg, part in zip(ins.args, parts):
            if isinstance(arg, int) and part is not None:
                body.append(f"a{arg} += {part};")
    body += [f"g{leaf.source}[{leaf.offset} + j] = a{k};" for k, leaf in enumerate(region.leaves)]
    return body


def _backward_function(region: Region) -> str:
    n_src, n_out = len(region.source_widths), len(region.outputs)
    setup = _source_setup(region)
    setup += [f"const float* gout{m} = gout[{m}];" for m in range(n_out)]
    setup += [f"float* gsrc{s} = gsrc[{s}];" for s in range(n_src)]
    rows = _row_pointers(region, [f"const float* go{m} = gout{m} + r * H;" for m in range(n_out)])
    rows += [f"float* g{s} = gsrc{s} + r * {w};" for s, w in enumerate(region.source_widths)]
    params = ("const float* const* src, const int64_t* ld, const float* const* gout, "
              "float* const* gsrc")  # fmt: skip
    return _loop(region, "pointwise_backward", params, setup, rows, _backward_body(region))


def cpp_source(region: Region) -> str:
    """The C++ translation unit for ``region``: ``pointwise_forward`` and ``pointwise_backward``."""
    return "\n\n".join([
        HEADER.read_text().replace("#pragma once\n", ""),  # a main file here
        "using namespace foldexp_math;",
        f"constexpr int64_t H = {region.width};",
        f"constexpr int64_t kParallel = {_PARALLEL_ELEMENTS};",
        _forward_function(region),
        _backward_function(region),
    ]) + "\n"  # fmt: skip


class _Kernel:
    """A region's compiled library and how to call it."""

    def __init__(self, region: Region, lib: ctypes.CDLL) -> None:
        self.region, self.lib = region, lib
        p, n = ctypes.c_void_p, ctypes.c_int64
        lib.pointwise_forward.argtypes = [n, p, p, p]
        lib.pointwise_backward.argtypes = [n, p, p, p, p]
        lib.pointwise_forward.restype = lib.pointwise_backward.restype = None
        # Columns of each source that no leaf reads get no gradient from the kernel: zeros.
        covered = [set() for _ in region.source_widths]
        for leaf in region.leaves:
            covered[leaf.source].update(range(leaf.offset, leaf.offset + region.width))
        self.full = [len(c) == w for c, w in zip(covered, region.source_widths)]

    def forward(self, sources: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        n = sources[0].shape[0]
        outs = [sources[0].new_empty((n, self.region.width)) for _ in self.region.outputs]
        if n:
            self.lib.pointwise_forward(n, _pointers(sources), _strides(sources), _pointers(outs))
        return outs

    def backward(
        self, sources: Sequence[torch.Tensor], grads: Sequence[torch.Tensor | None]
    ) -> list[torch.Tensor]:
        n = sources[0].shape[0]
        gouts = [
            sources[0].new_zeros((n, self.region.width)) if g is None else g.contiguous()
            for g in grads
        ]
        gsrc = [
            s.new_empty((n, w)) if full else s.new_zeros((n, w))
            for s, w, full in zip(sources, self.region.source_widths, self.full)
        ]
        if n:
            self.lib.pointwise_backward(
                n, _pointers(sources), _strides(sources), _pointers(gouts), _pointers(gsrc)
            )
        return gsrc


def _pointers(ts: Sequence[torch.Tensor]) -> Any:
    return (ctypes.c_void_p * len(ts))(*[t.data_ptr() for t in ts])


def _strides(ts: Sequence[torch.Tensor]) -> Any:
    return (ctypes.c_int64 * len(ts))(*[t.stride(0) for t in ts])


_kernels: dict[str, _Kernel | None] = {}


def _kernel(region: Region) -> _Kernel | None:
    """The compiled kernel for ``region`` (built once per source text), or ``None``."""
    text = cpp_source(region)
    digest = hashlib.sha256(text.encode()).hexdigest()[:20]
    if digest not in _kernels:
        try:
            src = _write_source(text, f"pointwise-{digest}.cpp")
            lib = build_and_open(f"pointwise-{digest}", [src], FLAGS, ctypes.CDLL)
            _kernels[digest] = _Kernel(region, lib)
        except Exception as err:  # noqa: BLE001  (no compiler, a failed build: torch ops serve)
            log.info("pointwise kernel not built, running torch ops: %s", err)
            _kernels[digest] = None
    return _kernels[digest]


def _write_source(text: str, name: str) -> Path:
    """Writes the generated source into the kernel cache, atomically, after the same check of
    the folder that a build makes: it is compiled into code this process loads."""
    folder = private_dir(kernel_cache_dir())
    path = folder / name
    fd, tmp = tempfile.mkstemp(prefix=name + ".", suffix=".tmp", dir=folder)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)
    return path


_TORCH_OPS = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "neg": torch.neg,
    "sigmoid": torch.sigmoid, "tanh": torch.tanh, "relu": torch.relu, "exp": torch.exp,
}  # fmt: skip


def _columns(source: torch.Tensor, offset: int, width: int) -> torch.Tensor:
    # A 1-D source is a row the user's code broadcasts, never a column block.
    return source if source.dim() < 2 else source[:, offset : offset + width]


def run_in_torch(region: Region, sources: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """The region's ops in torch, one call each: the user's own code, in effect."""
    w = region.width
    values: list[Any] = [_columns(sources[leaf.source], leaf.offset, w) for leaf in region.leaves]
    for ins in region.instrs:
        args = [values[a] if isinstance(a, int) else a.value for a in ins.args]
        if ins.op == "sub" and not isinstance(ins.args[0], int):
            values.append(torch.rsub(args[1], args[0]))  # a number minus a tensor
        elif ins.op in ("add", "mul") and not isinstance(ins.args[0], int):
            values.append(_TORCH_OPS[ins.op](args[1], args[0]))
        elif ins.op == "div" and not isinstance(ins.args[0], int):
            values.append(torch.reciprocal(args[1]) * args[0])
        else:
            values.append(_TORCH_OPS[ins.op](*args))
    return [values[v] for v in region.outputs]


class _RegionFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, call: RegionCall, *sources: torch.Tensor) -> tuple[torch.Tensor, ...]:
        ctx.call = call
        ctx.save_for_backward(*sources)
        return tuple(call.kernel.forward(sources))  # type: ignore[union-attr]

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[Any, ...]:
        sources = ctx.saved_tensors
        call: RegionCall = ctx.call
        if torch.is_grad_enabled():  # create_graph: gradients that are themselves differentiable
            outs = run_in_torch(call.region, sources)
            pairs = [(o, g) for o, g in zip(outs, grads) if g is not None]
            found = torch.autograd.grad(
                [o for o, _ in pairs], sources, [g for _, g in pairs],
                create_graph=True, allow_unused=True,
            )  # fmt: skip
            return (None, *found)
        gsrc = call.kernel.backward(sources, grads)  # type: ignore[union-attr]
        return (None, *(g if need else None for g, need in zip(gsrc, ctx.needs_input_grad[1:])))


class RegionCall:
    """Runs one region: its kernel where the sources fit it, else torch ops."""

    def __init__(self, region: Region) -> None:
        self.region = region
        self.kernel = _kernel(region)
        self.__name__ = f"pointwise_region_{len(region.instrs)}_ops"  # shown in fx's code

    def fits(self, sources: Sequence[torch.Tensor]) -> bool:
        n = sources[0].shape[0]
        for s, w in zip(sources, self.region.source_widths):
            if s.dtype != torch.float32 or not s.is_cpu or s.dim() != 2:
                return False
            if s.shape[0] != n or s.shape[1] != w or s.stride(1) != 1:
                return False
        return True

    def _expanded(self, sources: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        """The row sources expanded over the rows of the others (a row source that is not one
        row this time is left as it is: torch's ops then broadcast it, or fail, as written)."""
        n = next((s.shape[0] for s, row in zip(sources, self.region.row_sources) if not row), 1)
        w = self.region.width
        return tuple(
            s.reshape(1, w).expand(n, w) if row and s.numel() == w else s
            for s, row in zip(sources, self.region.row_sources)
        )

    def __call__(self, *sources: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if any(self.region.row_sources):
            sources = self._expanded(sources)
        if any(s.dim() == 2 and s.stride(1) != 1 and s.shape[1] > 1 for s in sources):
            # A strided piece (a transpose, x.view(n, H, 4)[:, :, k]): one copy, then one pass.
            sources = tuple(s.contiguous() if s.dim() == 2 else s for s in sources)
        if (
            self.kernel is None
            or not fused_cells_enabled()
            or transforms_active()
            or not self.fits(sources)
        ):
            return tuple(run_in_torch(self.region, sources))
        if not (torch.is_grad_enabled() and any(s.requires_grad for s in sources)):
            return tuple(self.kernel.forward(sources))  # inference: no graph to record
        return _RegionFunction.apply(self, *sources)
