"""Finds the runs of pointwise ops in a user's op body and runs each run as one kernel.

``PointwiseFusion`` wraps an op's body (a function of flat batched tensors). On its first call
in a mode (training or not, device) it traces the body with ``torch.fx`` — torch's layers and
foldexp's own stay calls (leaves), the user's Python is followed — records every value's shape
by running the traced graph once, and gathers each connected run of pointwise ops on equally
shaped ``(n, H)`` float32 values into a ``Region`` (``pointwise_code.py``): the run becomes one
call of a generated kernel, its inputs read where they lie (a ``chunk`` of a layer's output is a
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
as written. The checks cost one extra forward of one group per op and
mode, and a kernel's first build about a second (cached on disk after).
"""

from __future__ import annotations

import logging
import math
import operator
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import fx, nn
from torch.fx.passes.shape_prop import ShapeProp, TensorMetadata

from foldexp.kernels.pointwise_code import Const, Instr, Leaf, Region, RegionCall

__all__ = ["PointwiseFusion", "MIN_OPS"]

log = logging.getLogger(__name__)

MIN_OPS = 3  # a shorter run saves too few passes over memory to pay for a call of its own
_FUNCTIONS = {
    torch.sigmoid: "sigmoid", F.sigmoid: "sigmoid", torch.tanh: "tanh", F.tanh: "tanh",
    torch.relu: "relu", F.relu: "relu", torch.exp: "exp", torch.neg: "neg", operator.neg: "neg",
    torch.add: "add", operator.add: "add", torch.sub: "sub", operator.sub: "sub",
    torch.mul: "mul", operator.mul: "mul", torch.div: "div", operator.truediv: "div",
}  # fmt: skip
_METHODS = {"sigmoid", "tanh", "relu", "exp", "neg", "add", "sub", "mul", "div"}
_ARITY = {"sigmoid": 1, "tanh": 1, "relu": 1, "exp": 1, "neg": 1}
_SPLITS = {torch.chunk, torch.split}


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


def _meta(node: Any) -> Any:
    return node.meta.get("tensor_meta") if isinstance(node, fx.Node) else None


def _pointwise(node: fx.Node) -> tuple[str, tuple[Any, ...]] | None:
    """``(op, args)`` if ``node`` is a pointwise op on float32 ``(n, H)`` tensors of one shape."""
    if node.op == "call_function" and node.target in _FUNCTIONS:
        name = _FUNCTIONS[node.target]  # type: ignore[index]
        if node.kwargs and not (node.target is F.relu and node.kwargs == {"inplace": False}):
            return None
    elif node.op == "call_method" and node.target in _METHODS and not node.kwargs:
        name = str(node.target)
    else:
        return None
    meta = _meta(node)
    if not isinstance(meta, TensorMetadata) or meta.dtype != torch.float32 or len(meta.shape) != 2:
        return None
    if len(node.args) != _ARITY.get(name, 2):
        return None
    for a in node.args:
        if isinstance(a, fx.Node):
            m = _meta(a)
            if not isinstance(m, TensorMetadata) or m.shape != meta.shape or m.dtype != meta.dtype:
                return None
        elif isinstance(a, bool) or not isinstance(a, (int, float)) or not math.isfinite(a):
            return None
    if not any(isinstance(a, fx.Node) for a in node.args):
        return None
    return name, tuple(node.args)


def _column_piece(node: fx.Node) -> tuple[fx.Node, int, int] | None:
    """``(source, offset, source width)`` if ``node`` is a piece of a ``chunk``/``split`` of a
    2-D tensor along its columns (read in place, its gradient written there)."""
    if node.op != "call_function" or node.target is not operator.getitem:
        return None
    split, k = node.args
    if not isinstance(split, fx.Node) or not isinstance(k, int):
        return None
    is_split = (split.op == "call_method" and split.target in ("chunk", "split")) or (
        split.op == "call_function" and split.target in _SPLITS
    )
    if not is_split or not split.args or not isinstance(split.args[0], fx.Node):
        return None
    dim = split.kwargs.get("dim", split.args[2] if len(split.args) > 2 else 0)
    base, pieces = _meta(split.args[0]), _meta(split)
    if not isinstance(base, TensorMetadata) or len(base.shape) != 2 or dim not in (1, -1):
        return None
    if not isinstance(pieces, (tuple, list)) or not -len(pieces) <= k < len(pieces):
        return None
    k %= len(pieces)
    return split.args[0], sum(int(p.shape[1]) for p in pieces[:k]), int(base.shape[1])


def _column_slice(node: fx.Node) -> tuple[fx.Node, int, int] | None:
    """``(source, offset, source width)`` if ``node`` is ``x[:, a:b]`` of a 2-D tensor, with
    numbers for bounds."""
    if node.op != "call_function" or node.target is not operator.getitem:
        return None
    base, index = node.args
    if not isinstance(base, fx.Node) or not isinstance(index, tuple) or len(index) != 2:
        return None
    rows, cols = index
    if rows != slice(None) or not isinstance(cols, slice) or cols.step not in (None, 1):
        return None
    if not all(b is None or isinstance(b, int) for b in (cols.start, cols.stop)):
        return None
    whole, piece = _meta(base), _meta(node)
    if not isinstance(whole, TensorMetadata) or len(whole.shape) != 2:
        return None
    start, stop, _ = cols.indices(int(whole.shape[1]))
    if not isinstance(piece, TensorMetadata) or stop - start != piece.shape[1]:
        return None
    return base, start, int(whole.shape[1])


@dataclass(eq=False)
class _Plan:
    """One region of a graph: its nodes (graph order), the source nodes its kernel reads, the
    nodes whose values leave it, and its call."""

    nodes: list[fx.Node]
    sources: list[fx.Node]
    outputs: list[fx.Node]
    call: RegionCall


def _group(graph: fx.Graph) -> list[list[fx.Node]]:
    """Pointwise nodes of one shape joined along their edges, each join kept only if collapsing
    every group into one node leaves the graph acyclic (no path from a group through another
    node back into it). Graphs of op bodies are small: each join checks the whole graph."""
    nodes = list(graph.nodes)
    candidate = {n for n in nodes if _pointwise(n) is not None}
    parent = {n: n for n in nodes}

    def find(n: fx.Node) -> fx.Node:  # no path compression: a join may be undone
        while parent[n] is not n:
            n = parent[n]
        return n

    for v in nodes:
        if v not in candidate:
            continue
        for u in v.all_input_nodes:
            if u in candidate and find(u) is not find(v) and _meta(u).shape == _meta(v).shape:
                ru, rv = find(u), find(v)
                parent[rv] = ru
                if not _acyclic(nodes, find):
                    parent[rv] = rv
    groups: dict[fx.Node, list[fx.Node]] = {}
    for n in nodes:
        if n in candidate:
            groups.setdefault(find(n), []).append(n)
    return [g for g in groups.values() if len(g) >= MIN_OPS]


def _acyclic(nodes: list[fx.Node], find: Callable[[fx.Node], fx.Node]) -> bool:
    """Whether the graph with each group collapsed into one node has no cycle (Kahn's sort)."""
    preds: dict[fx.Node, set[fx.Node]] = {}
    succs: dict[fx.Node, set[fx.Node]] = {}
    for n in nodes:
        g = find(n)
        preds.setdefault(g, set())
        for i in n.all_input_nodes:
            h = find(i)
            if h is not g:
                preds[g].add(h)
                succs.setdefault(h, set()).add(g)
    count = {g: len(p) for g, p in preds.items()}
    ready = [g for g, c in count.items() if c == 0]
    seen = 0
    while ready:
        g = ready.pop()
        seen += 1
        for s in succs.get(g, ()):
            count[s] -= 1
            if count[s] == 0:
                ready.append(s)
    return seen == len(count)


def _plan(nodes: list[fx.Node]) -> _Plan | None:
    """The region of a group of nodes, with its kernel built; ``None`` if it cannot be built."""
    inside = set(nodes)
    width = int(_meta(nodes[0]).shape[1])
    sources: list[fx.Node] = []
    widths: list[int] = []
    leaves: dict[tuple[fx.Node, int], int] = {}
    leaf_of: dict[fx.Node, int] = {}
    for node in nodes:
        for a in node.args:
            if isinstance(a, fx.Node) and a not in inside and a not in leaf_of:
                piece = _column_piece(a) or _column_slice(a)
                source, offset, source_width = piece or (a, 0, width)
                if source not in sources:
                    sources.append(source)
                    widths.append(source_width)
                key = (source, offset)
                leaf_of[a] = leaves.setdefault(key, len(leaves))
    value = {**leaf_of, **{node: len(leaves) + k for k, node in enumerate(nodes)}}
    instrs = []
    for node in nodes:
        name, args = _pointwise(node)  # type: ignore[misc]
        instrs.append(Instr(name, tuple(
            value[a] if isinstance(a, fx.Node) else Const(float(a)) for a in args
        )))  # fmt: skip
    outputs = [n for n in nodes if any(u not in inside for u in n.users)]
    region = Region(
        width=width,
        source_widths=tuple(widths),
        leaves=tuple(Leaf(sources.index(s), off) for (s, off) in leaves),
        instrs=tuple(instrs),
        outputs=tuple(value[n] for n in outputs),
    )
    call = RegionCall(region)
    return _Plan(nodes, sources, outputs, call) if call.kernel is not None else None


def _rewrite(gm: fx.GraphModule, plans: list[_Plan]) -> None:
    """Replaces each plan's nodes by one call of its kernel, keeping the other nodes' order."""
    new = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    owner = {node: plan for plan in plans for node in plan.nodes}
    done: set[int] = set()

    def value(node: fx.Node) -> fx.Node:
        if node not in env:  # read before its place: a region's output, or a region's source
            if node in owner:  # needed by a region emitted early
                emit_region(owner[node])
            else:
                env[node] = new.node_copy(node, value)
        return env[node]

    def emit_region(plan: _Plan) -> None:
        if id(plan) in done:
            return
        done.add(id(plan))
        call = new.call_function(plan.call, tuple(value(s) for s in plan.sources))
        for k, out in enumerate(plan.outputs):
            env[out] = new.call_function(operator.getitem, (call, k))

    for node in gm.graph.nodes:
        plan = owner.get(node)
        if plan is None:
            if node not in env:
                env[node] = new.node_copy(node, value)
        elif node is plan.nodes[-1]:
            emit_region(plan)
    for node in reversed(list(new.nodes)):  # the pieces a kernel now reads in place
        unused_piece = (
            node.target is operator.getitem
            or node.target in _SPLITS
            or (node.op == "call_method" and node.target in ("chunk", "split"))
        )
        if unused_piece and node.op in ("call_function", "call_method") and not node.users:
            new.erase_node(node)
    gm.graph = new
    gm.recompile()


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
            node.target in _FUNCTIONS and not node.kwargs.get("inplace", False)
        )
    return node.op == "call_method" and node.target in (*_METHODS, "mm", "matmul")


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
            plans = [p for p in map(_plan, _group(gm.graph)) if p is not None]
            if not plans:
                return None
            _rewrite(gm, plans)
            torch.set_rng_state(state)
            if not _equal(expected, list(gm(*copies())), exact=False):
                log.info("pointwise ops not fused: the kernels' results differ from the body's")
                return None
        names = ", ".join(type(m).__name__ for m in self.modules) or "a function"
        sizes = " + ".join(str(len(p.nodes)) for p in plans)
        log.info("%s: %s pointwise ops run as %d generated kernel(s)", names, sizes, len(plans))
        return gm
