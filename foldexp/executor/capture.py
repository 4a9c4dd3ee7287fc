"""Capturing an op's body once into a forward graph and a backward graph (AOTAutograd).

The tape (``tape.py``) runs a training sweep as one autograd node. For that it needs, per op, a
forward that returns what the backward will need, and a backward that takes it: the two halves
AOTAutograd's partitioner cuts from the op's joint graph. ``captured(op, args, params)`` traces
the op's body once per (compile mode, device, argument dtypes and row shapes, parameter set,
train/eval, one row or many) with a symbolic row count, so one capture serves every group of
every plan (plans differ every batch; their groups' ops do not).

What a capture promises is checked, never assumed:

- **Shapes.** The row count is symbolic; every other size is fixed by the op's types. A size the
  trace or the compiler specialised on (a body branching on its row count; Inductor's CPU sums,
  which take another code path above 4,096 rows) leaves a guard; each new row count is checked
  against the guards once (cached), and a count that fails every capture of the op gets a
  capture of its own, up to ``MAX_CAPTURES`` (then it runs eagerly). One-row groups have their
  own capture: size 1 is special to the shape system.
- **Meaning.** A capture's first use is compared with the body run eagerly (values and
  gradients); a body that mutates its inputs or buffers, returns an alias the graphs leave out,
  or differs, is refused.
- **Twins.** Another op of the same structure (``shared_captures.py``: the same code, torch's
  or foldexp's, and the same values; a second model of the same cells) runs the first one's
  capture, once the check above passes for it too: a process pays one trace per cell, not one
  per model.
- **What cannot be traced** (data-dependent Python, a C++ kernel without a fake, hooks, loops
  of computed length) is refused at once. A refused op runs on the eager route, and is named
  once in the log with the reason.

``device.compile`` (``set_compile_mode``) chooses what runs the graphs: ``graphs`` runs the
captured aten graphs as they are (no compiler: the captures cost seconds); ``inductor``
compiles them with PyTorch's Inductor (C++/OpenMP on the CPU, Triton on CUDA; ``inductor.py``);
``off`` keeps the per-group autograd route (``run.py``).
"""

from __future__ import annotations

import importlib.util
import logging
import time
import warnings
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from foldexp.blocks.internal import Op
from foldexp.executor import shared_captures

__all__ = [
    "COMPILE_MODES",
    "MAX_CAPTURES",
    "Captured",
    "capture_key",
    "captured",
    "compile_mode",
    "compiling",
    "default_compile_mode",
    "resolve_compile_mode",
    "refusal",
    "report_captures",
    "set_compile_mode",
]

log = logging.getLogger(__name__)

COMPILE_MODES = ("off", "graphs", "inductor")
_mode: str | None = None  # None: each device's default (``default_compile_mode``)
# Captures of one op for one key and layout, each for the row counts its guards hold for. A
# compiler's size specialisations split the counts in a few ranges; more than this many
# captures means the body specialises on the count itself, where eager serves better.
MAX_CAPTURES = 4


def set_compile_mode(mode: str | None) -> str | None:
    """Sets how this process's training sweeps run (``None``: each device's default); returns
    the mode now in force.

    Raises:
        ValueError: ``mode`` is not one of ``COMPILE_MODES``.
    """
    global _mode
    if mode is not None and mode not in COMPILE_MODES:
        raise ValueError(f"device.compile={mode!r}: expected one of {', '.join(COMPILE_MODES)}")
    _mode = mode
    return _mode


def default_compile_mode(device_type: str) -> str:
    """``device.compile: null``. On the CPU the per-group route: foldexp's fused C++ cells make
    it faster than the captured graphs run as they are, and Inductor's compile (tens of seconds
    on two cores) costs more than a short run gains (``docs/PERFORMANCE.md``). On CUDA the tape,
    compiled by Inductor where Triton is installed (each cell's pointwise ops fused into a
    kernel or two, a user's cells too), else its graphs as they are."""
    if device_type != "cuda":
        return "off"
    return "inductor" if importlib.util.find_spec("triton") is not None else "graphs"


def resolve_compile_mode(setting: str | None, device_name: str) -> str:
    """``device.compile`` as a mode: the setting, or for ``None`` the default of the device a
    run named ``device_name`` (``cpu``, ``cuda``, ``auto``) takes."""
    if setting is not None:
        return setting
    cuda = device_name == "cuda" or (device_name == "auto" and torch.cuda.is_available())
    return default_compile_mode("cuda" if cuda else "cpu")


@contextmanager
def compiling(mode: str | None) -> Iterator[None]:
    """Within this context sweeps run in ``mode`` (``set_compile_mode``); the mode before is
    restored after."""
    old = _mode
    set_compile_mode(mode)
    try:
        yield
    finally:
        set_compile_mode(old)


def compile_mode(device_type: str = "cpu") -> str:
    """The mode a sweep on a device of ``device_type`` runs in."""
    return _mode if _mode is not None else default_compile_mode(device_type)


@dataclass
class Captured:
    """One op's forward and backward graphs, and how to call them.

    ``forward(*params, *args)`` returns the op's outputs, then the saved tensors, then the saved
    sizes; ``backward(*sizes, *tensors, *output_grads)`` one gradient per input (params first),
    ``None`` where there is none. ``grad_outputs[k]``: output ``k`` has a gradient input.
    """

    forward: Any
    backward: Any
    n_out: int
    n_saved: int
    n_sizes: int
    grad_outputs: list[bool]
    guards: Any  # the trace's guards on the row count, compiled; None: none
    n_params: int = 0
    rows_ok: dict[int, bool] = field(default_factory=dict)
    checked: bool = False
    exact: bool = False  # its outputs have their types' dtypes, on the arguments' device
    not_compiled: str | None = None  # why Inductor left its graphs as they are (None: it did not)

    def fits(self, args: list[Any], params: list[torch.Tensor], rows: int) -> bool:
        """Whether the graphs hold for ``rows`` rows (the trace's guards, checked once a count)."""
        ok = self.rows_ok.get(rows)
        if ok is None:
            ok = self.guards is None or bool(self.guards([*params, *args]))
            self.rows_ok[rows] = ok
        return ok


class Refused(Exception):
    """An op the tape cannot capture; the message says why."""


def capture_key(op: Op, params: list[torch.Tensor], mode: str, device: torch.device) -> tuple:
    """What a capture of ``op`` depends on besides its row count, read once per sweep: the mode,
    the device, each parameter's dtype, shape and whether it wants a gradient, and train/eval
    of every module in it. (Argument dtypes and shapes are fixed by the op's types.)"""
    parts = getattr(op, "parts", None) or [op]
    training = tuple(m.training for o in parts for m in o._walk()[0])
    layout = tuple((p.dtype, p.shape, p.requires_grad) for p in params)
    return (mode, device, layout, training)


def captured(
    op: Op,
    blocks: list[Any],
    layout: tuple[tuple[int, ...], ...],
    params: list[torch.Tensor],
    rows: int,
    key: tuple,
) -> Captured | None:
    """The op's capture for ``key`` (``capture_key``), this gather layout and this row count
    (one, or many), made on first use with the random generators' states put back after it;
    ``None`` where the op runs on the eager route (refused, named once in the log).

    ``blocks`` are the group's gathered arguments (``tape.tape_forward``): for each gather in
    ``layout``, the one argument at its position, or the ``k`` arguments at its ``k`` positions
    as one ``(k, rows, ...)`` block, split inside the graphs."""
    caps = op.runtime.setdefault("captures", {}).setdefault((key, layout, rows == 1), [])
    for cap in caps:
        if cap.fits(blocks, params, rows):
            return cap
    if "capture_refused" in op.runtime or len(caps) >= MAX_CAPTURES:
        return None
    devices = [a.device for a in blocks if isinstance(a, torch.Tensor) and a.device.type == "cuda"]
    start = time.perf_counter()
    cap = None
    try:
        with torch.random.fork_rng(devices=devices[:1]):
            cap = _capture(op, blocks, layout, params, rows, key)
        if not cap.fits(blocks, params, rows):
            raise Refused(f"its capture for {rows} rows does not hold for {rows} rows")
        caps.append(cap)
        _say_not_compiled(op, cap)
        _made[0] += 1
        _made[1] += time.perf_counter() - start
    except Refused as e:
        _refuse(op, str(e))
    except Exception as e:  # noqa: BLE001  (any failure of the tracer: eager route)
        _refuse(op, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    return cap if "capture_refused" not in op.runtime else None


_made = [0, 0.0, 0]  # captures made since the last report, their seconds, how many were twins'


def report_captures(mode: str) -> None:
    """Logs once the captures a sweep made (a first step, a first one-row group), with their
    seconds: for ``inductor`` a cold compile and a warm start (Inductor's cache) differ here."""
    if _made[0]:
        twins = f" ({_made[2]} of them another op's, of the same structure)" if _made[2] else ""
        log.info(
            "device.compile=%s: %d op(s) captured in %.1f s%s", mode, _made[0], _made[1], twins
        )
        _made[:] = [0, 0.0, 0]


def _refuse(op: Op, why: str) -> None:
    op.runtime["capture_refused"] = why
    log.info("%s runs on the eager route, not the tape: %s", op.name, why)


def _say_not_compiled(op: Op, cap: Captured) -> None:
    if cap.not_compiled is not None and "not_compiled" not in op.runtime:
        op.runtime["not_compiled"] = cap.not_compiled
        log.info("%s runs its graphs on the tape as they are, not compiled: %s", op.name,
                 cap.not_compiled)  # fmt: skip


def refusal(op: Op) -> str | None:
    """Why ``op`` runs on the eager route (``None``: it does not, or was not tried yet)."""
    return op.runtime.get("capture_refused")


def _example(args: list[Any]) -> list[Any]:
    """The group's argument blocks as the capture's example: float ones are fresh leaves."""
    out = []
    for a in args:
        if not isinstance(a, torch.Tensor):
            raise Refused(f"an argument is a {type(a).__name__}, not a tensor")
        x = a.detach()
        out.append(x.requires_grad_() if x.dtype.is_floating_point else x)
    return out


def _modules(op: Op) -> list[torch.nn.Module]:
    """The modules holding the op's parameters: its own, or each part's of a fused op."""
    parts = getattr(op, "parts", None) or [op]
    mods = {id(m): m for o in parts for m in (o.module,) if m is not None}
    return list(mods.values())


def _body(op: Op, params: list[torch.Tensor], layout: tuple[tuple[int, ...], ...]) -> Any:
    """``body(*params, *blocks)``: the op's forward with ``params`` standing in for its modules'
    own, so that they are the graphs' inputs, and its arguments taken from the gathers' blocks
    (``captured``)."""
    index = {id(p): i for i, p in enumerate(params)}
    names = []
    for m in _modules(op):
        if any(True for _ in m.buffers()):
            raise Refused("a module holds buffers (running statistics are updated in place)")
        names.append((m, [(n, index[id(p)]) for n, p in m.named_parameters(remove_duplicate=False)
                          if id(p) in index]))  # fmt: skip
    n_params = len(params)
    n_args = len(op.in_types)

    def body(*flat: torch.Tensor) -> list[torch.Tensor]:
        xs: list[Any] = [None] * n_args
        for block, positions in zip(flat[n_params:], layout):
            parts = (block,) if len(positions) == 1 else block.unbind(0)
            for pos, part in zip(positions, parts):
                xs[pos] = part
        with ExitStack() as stack:
            for m, pairs in names:
                swap = {n: flat[i] for n, i in pairs}
                stack.enter_context(torch.nn.utils.stateless._reparametrize_module(m, swap))
            return op.forward(xs)

    return body


def _capture(
    op: Op,
    blocks: list[Any],
    layout: tuple[tuple[int, ...], ...],
    params: list[torch.Tensor],
    rows: int,
    key: tuple,
) -> Captured:
    from foldexp.executor.graphs import trace_graphs  # the tracer's imports cost ~1 s

    if getattr(op, "parts", None) is None and type(op).__name__ == "LoopOp":
        raise Refused("a loop of computed length (its iterations read the host)")
    if op.has_forward_hooks():
        raise Refused("a forward hook is registered on one of its modules")
    held = {id(p) for m in _modules(op) for p in m.parameters()}
    if any(id(p) not in held for p in params):
        raise Refused("a parameter is not held by the op's module")
    example = _example(blocks)
    leaves = [p.detach().requires_grad_(p.requires_grad) for p in params]
    body = _body(op, params, layout)
    structure = shared_captures.structure_key(op, params)
    if structure is not None:
        structure = (structure, key, layout, rows == 1)
        for twin in shared_captures.kept(structure):
            if twin.fits(blocks, params, rows) and _agrees(op, twin, body, leaves, example, rows):
                _made[2] += 1
                return twin
    # the row dimension of each block: a (k, rows, ...) block's second
    row_dims = [int(len(positions) > 1) for positions in layout] if rows != 1 else None
    with warnings.catch_warnings():  # torch's tracer and compiler warn of their own internals
        warnings.simplefilter("ignore")
        cap = trace_graphs(body, [*leaves, *example], len(params), op.n_out, row_dims)
    cap.n_params = len(params)
    _check_against_eager(op, cap, body, leaves, example, rows)
    if structure is not None:
        shared_captures.keep(structure, cap)
    return cap


def _agrees(
    op: Op, twin: Captured, body: Any, params: list[torch.Tensor], example: list[Any], rows: int
) -> bool:
    """Whether ``twin`` (another op's capture, of ``op``'s structure) computes ``op``'s body:
    the check every capture passes, against this op's body run eagerly."""
    try:
        _check_against_eager(op, twin, body, params, example, rows)
    except Refused:
        return False
    return True


def _check_against_eager(
    op: Op, cap: Captured, body: Any, params: list[torch.Tensor], example: list[Any], rows: int
) -> None:
    """Runs the example through the graphs and eagerly; refuses the op where they differ. Random
    ops are compared for shapes only (their draws differ)."""
    inputs = [*params, *example]
    with torch.enable_grad():
        eager = body(*inputs)
    random = op.is_random()
    for k, (o, want) in enumerate(zip(eager, cap.grad_outputs)):
        if not isinstance(o, torch.Tensor):
            raise Refused(f"output {k} is not a tensor")
        if o.shape[:1] != (rows,) or o.shape[1:] != op.out_types[k].shape:
            raise Refused(f"output {k} has shape {tuple(o.shape)}, not its type's")
        if o.requires_grad != want:
            raise Refused(f"output {k}'s gradient is not one the graphs take")
    with torch.no_grad():
        flat = cap.forward(*inputs)
    outs = list(flat[: cap.n_out])
    devices = {x.device for x in example}
    cap.exact = len(devices) == 1 and all(
        o.dtype == t.dtype and o.device in devices for o, t in zip(outs, op.out_types)
    )
    if not random:
        for k, (o, e) in enumerate(zip(outs, eager)):
            if not torch.allclose(o, e.detach(), rtol=1e-4, atol=1e-5):
                raise Refused(f"its graph's output {k} differs from the eager body's")
    wants = [i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor) and x.requires_grad]
    diff = [o for o, w in zip(eager, cap.grad_outputs) if w]
    if not diff or not wants or random:
        return
    seeds = [torch.randn_like(o) for o in diff]
    expect = torch.autograd.grad(diff, [inputs[i] for i in wants], seeds, allow_unused=True)
    saved = flat[cap.n_out :]
    sizes, tensors = saved[cap.n_saved :], saved[: cap.n_saved]
    with torch.no_grad():
        got = cap.backward(*sizes, *tensors, *seeds)
    for i, e in zip(wants, expect):
        g = got[i]
        if (e is None) != (g is None) or (e is not None and not _close(g, e)):
            raise Refused(f"its graph's gradient of input {i} differs from autograd's")
    cap.checked = True


def _close(got: torch.Tensor, want: torch.Tensor) -> bool:
    """A gradient as autograd's; a sparse one (a word table's) compared as the dense it stands
    for, where ``allclose`` has no sparse kernel."""
    got, want = (t.to_dense() if t.is_sparse else t for t in (got, want))
    return torch.allclose(got, want, rtol=1e-4, atol=1e-5)
