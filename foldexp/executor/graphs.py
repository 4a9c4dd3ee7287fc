"""Tracing a body into AOTAutograd's forward and backward graphs, kept to be called directly.

``trace_graphs(body, inputs, n_params, n_out, row_dims)`` runs ``body`` once through
``aot_function`` with compilers that keep the two FX graphs the min-cut partitioner hands them
(what the backward recomputes rather than saves is its choice), then once backward, so that both
exist. The graphs' calling convention is the partitioner's: the forward returns the outputs,
then the saved tensors, then the saved sizes; the backward takes the sizes, then the tensors,
then one gradient per output that has one. The counts are read off the graphs and checked
against each other: a body whose graphs carry more (an input mutated, an output that aliases an
input) is refused.

With ``device.compile=inductor`` each graph is then compiled by Inductor (``inductor.py``). An op
with a graph Inductor cannot compile (a sparse gradient: SST's word table) is traced again as
``graphs`` traces it and stays on the tape, its graphs run as they are; the capture says why
(``Captured.not_compiled``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from functorch.compile import make_boxed_func, min_cut_rematerialization_partition
from torch._dynamo.source import ConstantSource
from torch._functorch.aot_autograd import aot_function
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import (
    SYMPY_INTERP,
    DimDynamic,
    ShapeEnv,
    StatelessSymbolicContext,
)

from foldexp.executor.capture import Captured, Refused, compile_mode

__all__ = ["trace_graphs"]


def trace_graphs(
    body: Any, inputs: list[Any], n_params: int, n_out: int, row_dims: Sequence[int] | None
) -> Captured:
    """``body``'s graphs for inputs shaped like ``inputs``: the first ``n_params`` (parameters)
    of fixed shape, the others with a symbolic row count in dimension ``row_dims[i]`` (all
    sizes fixed where ``row_dims`` is ``None``). Under ``inductor``, a graph Inductor cannot
    compile has both graphs traced again as ``graphs`` traces them (without Inductor's
    decompositions: the same numbers as that mode, dropout's draws included)."""
    inductor = compile_mode(_device(inputs)) == "inductor"
    cap = _trace(body, inputs, n_params, n_out, row_dims, inductor)
    if cap.not_compiled is not None:
        why = cap.not_compiled
        cap = _trace(body, inputs, n_params, n_out, row_dims, False)
        cap.not_compiled = why
    return cap


def _trace(
    body: Any,
    inputs: list[Any],
    n_params: int,
    n_out: int,
    row_dims: Sequence[int] | None,
    inductor: bool,
) -> Captured:
    dynamic = row_dims is not None
    kept: dict[str, Any] = {}
    if inductor:
        from foldexp.executor.inductor import compile_graph

    def keep(name: str) -> Any:
        def compiler(gm: torch.fx.GraphModule, example: Any) -> Any:
            kept[name] = gm
            if inductor and "not compiled" not in kept:  # here, in the tracer's fake mode
                try:
                    kept[name + " compiled"] = compile_graph(gm, example, name == "backward")
                except Exception as err:  # noqa: BLE001  (the graphs run as they are)
                    kept["not compiled"] = f"{type(err).__name__}: {_first_line(err)}"
            return make_boxed_func(gm)

        return compiler

    traced = aot_function(
        body,
        keep("forward"),
        keep("backward"),
        partition_fn=min_cut_rematerialization_partition,
        decompositions=_decompositions() if inductor else None,
        dynamic=dynamic,
    )
    mode, fakes = _fake_inputs(inputs, n_params, row_dims)
    with torch.enable_grad(), mode:
        outs = traced(*fakes)
        if not isinstance(outs, (list, tuple)) or len(outs) != n_out:
            raise Refused(f"its body returned {type(outs).__name__}, not {n_out} outputs")
        grad_outputs = [isinstance(o, torch.Tensor) and o.requires_grad for o in outs]
        diff = [o for o, w in zip(outs, grad_outputs) if w]
        if diff:
            torch.autograd.backward(diff, [torch.zeros_like(o) for o in diff])
    fw, bw = kept.get("forward"), kept.get("backward")
    if fw is None:
        raise Refused("the tracer produced no forward graph")
    n_sizes, n_saved, n_tangents = _backward_inputs(bw)
    if n_tangents != sum(grad_outputs):
        raise Refused("its backward takes other gradients than its outputs have")
    n_fw_outs = len(_outputs(fw))
    if n_fw_outs != n_out + n_saved + n_sizes:
        raise Refused("it mutates an input or returns an alias of one")
    placeholders = [n.meta.get("val") for n in fw.graph.nodes if n.op == "placeholder"]
    if bw is not None:
        _drop_detaches(bw)
    run_fw = kept.get("forward compiled") or direct_call(fw)
    run_bw = kept.get("backward compiled") or (direct_call(bw) if bw is not None else None)
    cap = Captured(
        run_fw, run_bw, n_out, n_saved, n_sizes, grad_outputs,
        _guards(placeholders, n_params, row_dims) if row_dims is not None else None,
    )  # fmt: skip
    cap.not_compiled = kept.get("not compiled")
    return cap


def _first_line(err: Exception) -> str:
    lines = [line for line in str(err).splitlines() if line.strip()]
    return lines[0][:200] if lines else ""


def _guards(placeholders: list[Any], n_params: int, row_dims: Sequence[int]) -> Any:
    """The trace's guards on its inputs' sizes as one function of the inputs that says whether
    they hold (``None``: there are none). Torch's guards leave out every size that is fixed:
    the op's types and the capture's key hold most, but a trace can pin the row count itself to
    one value (a body branching at two adjacent counts, or reading its count), and that
    capture holds for that count alone: those pinned row sizes are checked here."""
    shape_env = next((v.fake_mode.shape_env for v in placeholders if hasattr(v, "fake_mode")), None)
    if shape_env is None:
        return None
    code = shape_env.produce_guards_expression(placeholders)
    pinned = []
    for i, dim in enumerate(row_dims, start=n_params):
        size = placeholders[i].shape[dim] if placeholders[i].dim() > dim else None
        fixed = size.node.maybe_as_int() if isinstance(size, torch.SymInt) else size
        if fixed is not None:
            pinned.append((i, dim, fixed))
    if not code and not pinned:
        return None
    compiled = compile(code, "<foldexp capture guards>", "eval") if code else None

    def hold(inputs: list[Any]) -> bool:
        if any(inputs[i].shape[dim] != size for i, dim, size in pinned):
            return False
        names = {f"t{i}": x for i, x in enumerate(inputs)}
        return compiled is None or bool(eval(compiled, SYMPY_INTERP, {"L": names}))  # noqa: S307

    return hold


def _device(inputs: list[Any]) -> str:
    return next((x.device.type for x in inputs if isinstance(x, torch.Tensor)), "cpu")


def _decompositions() -> dict[Any, Any]:
    """The decompositions Inductor expects its graphs to have been traced with."""
    from torch._inductor.decomposition import select_decomp_table

    return select_decomp_table()


def _fake_inputs(
    inputs: list[Any], n_params: int, row_dims: Sequence[int] | None
) -> tuple[FakeTensorMode, list[Any]]:
    """Fake stand-ins of ``inputs`` in a mode of their own: only the arguments' row dimension
    symbolic, so the tracer reasons about one unknown size, not every size (sizes of equal
    value are not tied: ``duck_shape=False``). A one-row capture has a shape environment too,
    with no symbol in it: Inductor's graph cache needs one."""
    mode = FakeTensorMode(shape_env=ShapeEnv(duck_shape=False))
    fakes = []
    for i, x in enumerate(inputs):
        if i < n_params or row_dims is None or x.dim() <= row_dims[i - n_params]:
            fakes.append(mode.from_tensor(x, static_shapes=True))
            continue
        sizes = [DimDynamic.STATIC] * x.dim()
        sizes[row_dims[i - n_params]] = DimDynamic.DYNAMIC
        context = StatelessSymbolicContext(dynamic_sizes=sizes)
        source = ConstantSource(f"arg{i}")
        fakes.append(mode.from_tensor(x, symbolic_context=context, source=source))
    return mode, fakes


def _outputs(gm: torch.fx.GraphModule) -> tuple[Any, ...]:
    out = next(n for n in gm.graph.nodes if n.op == "output")
    return tuple(out.args[0])


def _backward_inputs(bw: torch.fx.GraphModule | None) -> tuple[int, int, int]:
    """``(sizes, saved tensors, output gradients)`` the backward graph takes, in that order."""
    if bw is None:
        return 0, 0, 0
    sizes = saved = tangents = 0
    for n in bw.graph.nodes:
        if n.op != "placeholder":
            continue
        if n.name.startswith("tangents"):
            tangents += 1
        elif isinstance(n.meta.get("val"), torch.Tensor):
            if tangents:
                raise Refused("its backward's inputs are not in the partitioner's order")
            saved += 1
        else:
            if saved or tangents:
                raise Refused("its backward's inputs are not in the partitioner's order")
            sizes += 1
    return sizes, saved, tangents


def direct_call(gm: torch.fx.GraphModule) -> Any:
    """``gm`` as a plain Python function that calls each aten overload's C++ entry directly:
    FX's own code calls ``torch.ops.aten.f.overload(...)``, a Python ``__call__`` in front of
    the same entry (about 18% of a small cell's forward). Each value is dropped after its last
    use, as FX's code does."""
    nodes = list(gm.graph.nodes)
    last_use = {n: i for i, node in enumerate(nodes) for n in node.all_input_nodes}
    names: dict[str, Any] = {}

    def ref(a: Any) -> str:
        if isinstance(a, torch.fx.Node):
            return a.name
        if isinstance(a, (list, tuple)):
            inner = ", ".join(ref(x) for x in a)
            return f"[{inner}]" if isinstance(a, list) else f"({inner}{',' if len(a) == 1 else ''})"
        key = f"_k{len(names)}"
        names[key] = a
        return key

    params, lines = [], []
    for i, n in enumerate(nodes):
        if n.op == "placeholder":
            params.append(n.name)
        elif n.op == "call_function":
            fn = n.target._op if isinstance(n.target, torch._ops.OpOverload) else n.target
            args = [ref(a) for a in n.args] + [f"{k}={ref(v)}" for k, v in n.kwargs.items()]
            lines.append(f"    {n.name} = {ref(fn)}({', '.join(args)})")
        elif n.op == "output":
            lines.append(f"    return {ref(tuple(n.args[0]))}")
            break
        else:
            raise Refused(f"its graph has a {n.op} node")
        done = [m.name for m in n.all_input_nodes if last_use.get(m) == i] if i else []
        if n.op == "call_function" and done:
            lines.append(f"    del {', '.join(dict.fromkeys(done))}")
    source = f"def run({', '.join(params)}):\n" + "\n".join(lines)
    exec(compile(source, "<foldexp tape graph>", "exec"), names)  # noqa: S102  (our own code)
    return names["run"]


def _drop_detaches(gm: torch.fx.GraphModule) -> None:
    """Removes ``detach`` nodes: the tape runs the backward without grad, where they are calls
    that change nothing."""
    detach = torch.ops.aten.detach.default
    for n in list(gm.graph.nodes):
        if n.op == "call_function" and n.target is detach:
            n.replace_all_uses_with(n.args[0])
            gm.graph.erase_node(n)
    gm.recompile()
