"""Finds the runs of pointwise ops in a user's op body and runs each run as one kernel.

``PointwiseFusion`` wraps an op's body (a function of flat batched tensors). On its first call
in a mode (training or not, device) it traces the body with ``torch.fx`` — torch's layers and
foldexp's own stay calls (leaves), the user's Python is followed — records every value's shape
by running the traced graph once, and gathers each connected run of pointwise ops on equally
shaped ``(n, H)`` float32 values (and bias rows broadcast over them) into a region
(``pointwise_regions.py``): the run becomes one call of a kernel generated for it
(``pointwise_code.py``), its inputs read where they lie (a ``chunk`` of a layer's output is a
column block, not a copy).

The rewritten body is used only when it is safe to: the trace must succeed (data-dependent
Python, such as ``if x.sum() > 0``, stops it), the traced graph must give exactly the body's
outputs on the first batch, and the rewritten one the same to float rounding; these checks run
without gradients, on copies of the inputs, with the random generators, the modules' buffers and
their Python attributes put back as they were, so the run itself is unchanged. A graph with an
in-place op is not rewritten: a kernel reads its inputs where the region ends, and a value
changed in between would be read changed; nor is a body that changes its modules' attributes
(a counter), which the traced graph would no longer do. A module whose parameters, submodules
or plain attributes (which a trace bakes in) change after the trace runs as written from then
on. Otherwise, and where no run of at least ``MIN_OPS`` pointwise ops is found, the body runs
as written. The checks cost one extra forward of one group per op and mode, and a kernel's
first build about a second (cached on disk after).

What it wins: on the CPU's default route (``device.compile=off``) it is what holds a user's cells
level with foldexp's own. The peers' benchmark (``foldexp bench bench=peers``, 2 threads, hidden
128), a user's plain cells over the level batching, two alternating runs: 3.05, 2.98× with it,
2.68, 2.49× without (torch's ops), 2.85, 2.65× on the tape under Inductor, which would also cost a
28 s first compile. On the tape and on CUDA Inductor fuses the same runs, and this stays out.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import fx, nn
from torch.fx.passes.shape_prop import ShapeProp

from foldexp.kernels.pointwise_regions import (
    FUNCTIONS,
    METHODS,
    MIN_OPS,
    find_groups,
    plan_region,
    rewrite,
)

__all__ = ["PointwiseFusion", "MIN_OPS"]

log = logging.getLogger(__name__)

# foldexp's own layers and cells call its kernels, which a symbolic trace cannot follow.
_LIBRARY_LAYERS = ("foldexp.kernels.", "foldexp.blocks.", "foldexp.models.")


# ``x += y`` changes ``x`` in place, but a plain ``fx.Proxy`` has no ``__iadd__``: Python falls
# back to ``x = x + y`` and the trace would not show the change that views of ``x`` (a column
# block, the input itself) see. Our proxies record it as ``operator.iadd`` instead.
_AUGMENTED = {
    "iadd": operator.iadd, "isub": operator.isub, "imul": operator.imul,
    "itruediv": operator.itruediv, "ifloordiv": operator.ifloordiv, "imod": operator.imod,
    "ipow": operator.ipow, "imatmul": operator.imatmul, "iand": operator.iand,
    "ior": operator.ior, "ixor": operator.ixor, "ilshift": operator.ilshift,
    "irshift": operator.irshift,
}  # fmt: skip


class _Proxy(fx.Proxy):
    pass


def _augmented_method(fn: Callable[[Any, Any], Any]) -> Callable[[fx.Proxy, Any], fx.Proxy]:
    def method(self: fx.Proxy, other: Any) -> fx.Proxy:
        return self.tracer.create_proxy("call_function", fn, (self, other), {})

    return method


for _name, _fn in _AUGMENTED.items():
    setattr(_Proxy, f"__{_name}__", _augmented_method(_fn))


class _Tracer(fx.Tracer):
    def is_leaf_module(self, m: nn.Module, qualified_name: str) -> bool:
        own = type(m).__module__.startswith(_LIBRARY_LAYERS)
        return own or super().is_leaf_module(m, qualified_name)

    def proxy(self, node: fx.Node) -> fx.Proxy:
        return _Proxy(node, self)


def _root(fn: Callable[..., Any], n_inputs: int, modules: Sequence[nn.Module]) -> nn.Module:
    """A module whose ``forward(x0, …)`` calls ``fn``, holding the modules ``fn`` uses."""
    names = ", ".join(f"x{i}" for i in range(n_inputs))
    scope: dict[str, Any] = {}
    exec(f"def forward(self, {names}):\n    return self._body({names})\n", scope)  # noqa: S102
    root = type("PointwiseBody", (nn.Module,), {"forward": scope["forward"]})()
    for i, m in enumerate(modules):
        root.add_module(f"m{i}", m)
    object.__setattr__(root, "_body", fn)
    return root


_PLAIN_OF = {operator.iadd: operator.add, operator.isub: operator.sub,
             operator.imul: operator.mul, operator.itruediv: operator.truediv}  # fmt: skip
_FRESH_LAYERS = (nn.Linear, nn.Bilinear)
_FRESH_FUNCTIONS = {torch.mm, torch.matmul, torch.addmm, torch.bmm, operator.matmul, F.linear}


def _fresh(gm: fx.GraphModule, node: fx.Node) -> bool:
    """Whether ``node``'s value is a new tensor, shared with no other value: a dense layer's or a
    product's output, or a pointwise op's."""
    if node.op == "call_module":
        return isinstance(gm.get_submodule(str(node.target)), _FRESH_LAYERS)
    if node.op == "call_function":
        return node.target in _FRESH_FUNCTIONS or (
            node.target in FUNCTIONS and not node.kwargs.get("inplace", False)
        )
    return node.op == "call_method" and node.target in (*METHODS, "mm", "matmul")


def _plain_augmented(gm: fx.GraphModule) -> None:
    """``y = lin(x); y += z`` (SPINN's and many Tree-LSTMs' sum of projections) changes a fresh
    tensor that nothing else reads: exactly ``y = y + z``, which a region can take."""
    for node in gm.graph.nodes:
        target = node.args[0] if node.op == "call_function" and node.args else None
        if node.target in _PLAIN_OF and isinstance(target, fx.Node) and len(target.users) == 1:
            if _fresh(gm, target):
                node.target = _PLAIN_OF[node.target]
    gm.recompile()


def _in_place(gm: fx.GraphModule) -> bool:
    """Whether the graph may change a tensor in place (``x.mul_(2)``, ``x += y``, ``out=``,
    ``inplace=True``, a layer built with ``inplace=True``)."""
    for node in gm.graph.nodes:
        if node.op == "call_module":
            if getattr(gm.get_submodule(node.target), "inplace", False):
                return True
            continue
        if node.op not in ("call_function", "call_method"):
            continue
        if node.op == "call_function" and node.target in _AUGMENTED.values():
            return True
        name = node.target if node.op == "call_method" else getattr(node.target, "__name__", "")
        trailing = name.endswith("_") and not name.endswith("__")  # mul_, not __mul__
        if trailing or "out" in node.kwargs:
            return True
        if node.kwargs.get("inplace", False):
            return True
    return False


class _Snapshot:
    """What a trace depends on besides its inputs: each module's plain attributes (a trace bakes
    their values in), parameters, buffers and submodules, all by identity; ``changed()`` says
    whether any was reassigned, added or removed since (a few µs: C-level comparisons)."""

    def __init__(self, modules: Sequence[nn.Module]) -> None:
        self.dicts = []
        for top in modules:
            for m in top.modules():
                for d in (vars(m), m._parameters, m._buffers, m._modules):
                    self.dicts.append((d, len(d), list(d.values())))

    def changed(self) -> bool:
        return any(
            len(d) != n or not all(map(operator.is_, d.values(), values))
            for d, n, values in self.dicts
        )


def _restore(now: dict[str, Any], saved: dict[str, Any]) -> None:
    """Puts a module's attributes back entry by entry: never emptied on the way, so that another
    thread running the module meanwhile still finds every attribute."""
    for key in [k for k in now if k not in saved]:
        del now[key]
    for key, value in saved.items():
        if now.get(key, _restore) is not value:
            now[key] = value


@contextmanager
def _untouched(modules: Sequence[nn.Module]) -> Iterator[None]:
    """Runs the checks as if they had not run: generators, buffers (running statistics) and the
    modules' Python attributes (a counter) are restored afterwards, gradients are not
    recorded."""
    buffers = [(b, b.detach().clone()) for m in modules for b in m.buffers()]
    attributes = [(m, dict(vars(m))) for top in modules for m in top.modules()]
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        try:
            yield
        finally:
            for b, saved in buffers:
                b.copy_(saved)
            for m, saved_attributes in attributes:
                _restore(vars(m), saved_attributes)


def _equal(a: Sequence[Any], b: Sequence[Any], exact: bool) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):
            return False
        if x.shape != y.shape or x.dtype != y.dtype:
            return False
        same = torch.equal(x, y) if exact else torch.allclose(x, y, rtol=1e-4, atol=1e-6)
        if not same:
            return False
    return True


class PointwiseFusion:
    """An op body ``fn(*flat_tensors) -> list`` whose runs of pointwise ops run as kernels.

    ``modules``: the modules ``fn`` calls (for the trace, and to find buffers the checks must
    leave alone). Call it as ``fusion(fn, args)``: ``fn`` is passed each time so that the
    fusion keeps no reference to the op that owns it.
    """

    def __init__(self, modules: Sequence[nn.Module | None]) -> None:
        self.modules = list({id(m): m for m in modules if isinstance(m, nn.Module)}.values())
        # Per mode, the rewritten body and what it was traced with, or None: as written.
        self._bodies: dict[tuple[Any, ...], tuple[fx.GraphModule, _Snapshot] | None] = {}
        # Set once a CPU call found nothing to fuse (no trace, no run, a failed check): the
        # caller then runs the body as written without asking again.
        self.unfusable = False

    def bodies(self) -> list[fx.GraphModule | None]:
        """The rewritten body of each mode seen so far (``None``: it runs as written)."""
        return [None if e is None else e[0] for e in self._bodies.values()]

    def _mode(self, args: Sequence[Any]) -> tuple[Any, ...]:
        # The modules' own training flags: Python branching on ``self.training`` is fixed in a
        # trace. (A submodule switched apart from them is not looked at, to keep this cheap.)
        device = args[0].device.type if args and isinstance(args[0], torch.Tensor) else None
        return (device, *(m.training for m in self.modules))

    def __call__(self, fn: Callable[..., Sequence[Any]], args: Sequence[Any]) -> list[Any]:
        key = self._mode(args)
        if key not in self._bodies:
            self._bodies[key] = self._prepare(fn, args)
        entry = self._bodies[key]
        if entry is None:
            return list(fn(*args))
        body, snapshot = entry
        if snapshot.changed():
            # A constant or parameter baked into the trace changed: as written from now on.
            self._bodies[key] = None
            return list(fn(*args))
        return list(body(*args))

    def _prepare(
        self, fn: Callable[..., Sequence[Any]], args: Sequence[Any]
    ) -> tuple[fx.GraphModule, _Snapshot] | None:
        if not args or any(not isinstance(a, torch.Tensor) or a.device.type != "cpu"
                           for a in args):  # fmt: skip
            return None  # (a dry run on the meta device, a GPU: CPU calls may still fuse)
        try:
            with _untouched(self.modules):  # the trace runs the user's Python too
                root = _root(fn, len(args), self.modules)
                gm = fx.GraphModule(root, _Tracer().trace(root))
            _plain_augmented(gm)
            body = None if _in_place(gm) else self._checked(gm, fn, args)
        except Exception as err:  # noqa: BLE001  (the body as written is always correct)
            log.debug("pointwise ops not fused: %s: %s", type(err).__name__, err)
            body = None
        self.unfusable = body is None and not self._bodies
        return None if body is None else (body, _Snapshot(self.modules))

    def _checked(
        self, gm: fx.GraphModule, fn: Callable[..., Sequence[Any]], args: Sequence[Any]
    ) -> fx.GraphModule | None:
        # Copies, each run its own: the body as written may change its inputs in place.
        def copies() -> list[Any]:
            return [a.detach().clone() for a in args]

        with _untouched(self.modules):
            state, before = torch.get_rng_state(), _Snapshot(self.modules)
            expected = list(fn(*copies()))
            if before.changed():  # Python side effects (a counter): the trace would drop them
                return None
            torch.set_rng_state(state)
            if not _equal(expected, list(ShapeProp(gm).propagate(*copies())), exact=True):
                return None
            plans = [p for p in map(plan_region, find_groups(gm.graph)) if p is not None]
            if not plans:
                return None
            rewrite(gm, plans)
            torch.set_rng_state(state)
            if not _equal(expected, list(gm(*copies())), exact=False):
                log.info("pointwise ops not fused: the kernels' results differ from the body's")
                return None
        if not any(self.bodies()):  # once per op, not again for its other modes
            names = ", ".join(type(m).__name__ for m in self.modules) or "a function"
            sizes = " + ".join(str(len(p.nodes)) for p in plans)
            log.info("%s: %s pointwise ops run as %d generated kernel(s)", names, sizes, len(plans))
        return gm
