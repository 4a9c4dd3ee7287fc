"""Finds the regions of a traced op body and rewrites the body to call their kernels.

A region is a connected run of at least ``MIN_OPS`` pointwise ops (``FUNCTIONS``, ``METHODS``)
on equally shaped float32 ``(n, H)`` values (and rows ``(H,)``/``(1, H)`` broadcast over them)
of a ``torch.fx`` graph whose nodes carry their shapes (``ShapeProp``). ``find_groups`` joins
such nodes along their edges as long as collapsing each group into one node leaves the graph
acyclic; ``plan_region`` turns a group into a ``Region`` (``pointwise_code.py``) and builds its
kernel, reading a ``chunk``/``split`` piece or a literal column slice of a layer's output in
place; ``rewrite`` replaces each group by one call of its kernel. ``pointwise_graph.py`` decides
when a body may be rewritten at all.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import fx
from torch.fx.passes.shape_prop import TensorMetadata

from foldexp.kernels.pointwise_code import Const, Instr, Leaf, Region, RegionCall

__all__ = ["MIN_OPS", "FUNCTIONS", "METHODS", "Plan", "find_groups", "plan_region", "rewrite"]

MIN_OPS = 3  # a shorter run saves too few passes over memory to pay for a call of its own
FUNCTIONS = {
    torch.sigmoid: "sigmoid", F.sigmoid: "sigmoid", torch.tanh: "tanh", F.tanh: "tanh",
    torch.relu: "relu", F.relu: "relu", torch.exp: "exp", torch.neg: "neg", operator.neg: "neg",
    torch.add: "add", operator.add: "add", torch.sub: "sub", operator.sub: "sub",
    torch.mul: "mul", operator.mul: "mul", torch.div: "div", operator.truediv: "div",
}  # fmt: skip
METHODS = {"sigmoid", "tanh", "relu", "exp", "neg", "add", "sub", "mul", "div"}
_ARITY = {"sigmoid": 1, "tanh": 1, "relu": 1, "exp": 1, "neg": 1}
_SPLITS = {torch.chunk, torch.split}


def _meta(node: Any) -> Any:
    return node.meta.get("tensor_meta") if isinstance(node, fx.Node) else None


def _row(shape: Any, full: Any) -> bool:
    """Whether a value of ``shape`` is one row that broadcasts over a ``full`` ``(n, H)`` value:
    ``(H,)`` or ``(1, H)``, a bias a user adds of their own."""
    return tuple(shape) in ((full[1],), (1, full[1])) and tuple(shape) != tuple(full)


def _pointwise(node: fx.Node) -> tuple[str, tuple[Any, ...]] | None:
    """``(op, args)`` if ``node`` is a pointwise op on float32 ``(n, H)`` tensors of one shape,
    or one row of it broadcast over the rows."""
    if node.op == "call_function" and node.target in FUNCTIONS:
        name = FUNCTIONS[node.target]  # type: ignore[index]
        if node.kwargs and not (node.target is F.relu and node.kwargs == {"inplace": False}):
            return None
    elif node.op == "call_method" and node.target in METHODS and not node.kwargs:
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
            if not isinstance(m, TensorMetadata) or m.dtype != meta.dtype:
                return None
            if m.shape != meta.shape and not _row(m.shape, meta.shape):
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
class Plan:
    """One region of a graph: its nodes (graph order), the source nodes its kernel reads, the
    nodes whose values leave it, and its call."""

    nodes: list[fx.Node]
    sources: list[fx.Node]
    outputs: list[fx.Node]
    call: RegionCall


def find_groups(graph: fx.Graph) -> list[list[fx.Node]]:
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


def plan_region(nodes: list[fx.Node]) -> Plan | None:
    """The region of a group of nodes, with its kernel built; ``None`` if it cannot be built."""
    inside = set(nodes)
    width = int(_meta(nodes[0]).shape[1])
    sources: list[fx.Node] = []
    widths: list[int] = []
    rows: list[bool] = []
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
                    rows.append(_row(_meta(source).shape, _meta(node).shape))
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
        row_sources=tuple(rows),
    )
    call = RegionCall(region)
    return Plan(nodes, sources, outputs, call) if call.kernel is not None else None


def rewrite(gm: fx.GraphModule, plans: list[Plan]) -> None:
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

    def emit_region(plan: Plan) -> None:
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
