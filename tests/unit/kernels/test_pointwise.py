"""A user's pointwise ops as generated kernels (``kernels/pointwise_graph.py``,
``kernels/pointwise_code.py``): values and gradients against the body as written, second
derivatives, what stays torch's (Python branching on values, broadcasting, float64), the checks
leaving generators and buffers as they were, graphs whose runs must not be merged into a cycle,
and the engine's use of it, batched == eager."""

from __future__ import annotations

import operator

import pytest
import torch
from torch import nn

import foldexp.blocks as fb
from foldexp import Compiler
from foldexp.executor import calls as executor
from foldexp.kernels import native
from foldexp.kernels.pointwise_code import Const, Instr, Leaf, Region, RegionCall, run_in_torch
from foldexp.kernels.pointwise_graph import PointwiseFusion
from foldexp.models.tree_lstm import binary_tree
from foldexp.testing import check_block

pytestmark = pytest.mark.skipif(
    native.load_kernels() is None, reason="no C++ compiler: no kernel can be built"
)
TOL = dict(rtol=1e-4, atol=1e-5)  # sums of hundreds of rows, each ~1 ulp off


class PlainCell(nn.Module):
    """A binary Tree-LSTM cell as a user writes it."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.gates = nn.Linear(2 * hidden, 5 * hidden)

    def forward(self, left: tuple, right: tuple) -> tuple[torch.Tensor, torch.Tensor]:
        (hl, cl), (hr, cr) = left, right
        i, fl, fr, o, u = self.gates(torch.cat([hl, hr], dim=1)).chunk(5, dim=1)
        c = torch.sigmoid(i) * torch.tanh(u) + torch.sigmoid(fl) * cl + torch.sigmoid(fr) * cr
        return torch.sigmoid(o) * torch.tanh(c), c


class PlainLeaf(nn.Module):
    def __init__(self, embed: int, hidden: int) -> None:
        super().__init__()
        self.gates = nn.Linear(embed, 3 * hidden)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        i, o, u = self.gates(x).chunk(3, dim=1)
        c = torch.sigmoid(i) * torch.tanh(u)
        return torch.sigmoid(o) * torch.tanh(c), c


def _cell_fn(cell: nn.Module):
    return lambda hl, cl, hr, cr: list(cell((hl, cl), (hr, cr)))


def _inputs(n: int, hidden: int, k: int, seed: int = 0, scale: float = 2.0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [(scale * torch.randn(n, hidden, generator=g)).requires_grad_() for _ in range(k)]


def _regions(body) -> list[RegionCall]:
    return [n.target for n in body.graph.nodes if isinstance(n.target, RegionCall)]


def _agree(fusion: PointwiseFusion, fn, args, params, **tol) -> None:
    """fused == as written: values, and gradients of the inputs and ``params``."""
    tol = tol or TOL
    got, want = fusion(fn, args), fn(*args)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, **tol)
    g = torch.Generator().manual_seed(1)
    grads = [torch.randn(o.shape, generator=g) for o in want]
    wrt = [*args, *params]
    for a, b in zip(torch.autograd.grad(got, wrt, grads), torch.autograd.grad(want, wrt, grads)):
        torch.testing.assert_close(a, b, **tol)


@pytest.mark.parametrize("n", [0, 1, 7, 300])
def test_a_users_tree_lstm_cell_becomes_one_kernel(n: int) -> None:
    torch.manual_seed(0)
    cell = PlainCell(16)
    fusion = PointwiseFusion([cell])
    args = _inputs(max(n, 1), 16, 4)
    fusion(_cell_fn(cell), args)  # the first call traces, checks and builds
    (body,) = fusion.bodies()
    (region,) = _regions(body)
    assert len(region.region.instrs) == 12  # the whole update, chunk read in place
    assert not any(n.target == "chunk" for n in body.graph.nodes)
    _agree(fusion, _cell_fn(cell), _inputs(n, 16, 4, seed=2), list(cell.parameters()))


def test_every_op_and_constants_on_either_side() -> None:
    def body(x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
        a = torch.relu(x) * 0.5 - y.neg() + 2
        b = 1.0 - torch.sigmoid(a) / (torch.exp(-y.abs()) + 1)  # abs stays torch's
        c = torch.tanh(b) * a + 3 / (2 + torch.sigmoid(x)) - torch.mul(x, y).sub(1).div(4)
        return [c, torch.add(b, -a)]

    fusion = PointwiseFusion([])
    args = _inputs(33, 40, 2, scale=3.0)
    fusion(body, args)
    (compiled,) = fusion.bodies()
    ops = {ins.op for call in _regions(compiled) for ins in call.region.instrs}
    assert ops == {"relu", "mul", "sub", "neg", "add", "sigmoid", "div", "exp", "tanh"}
    _agree(fusion, body, _inputs(33, 40, 2, seed=5, scale=3.0), [])


def test_a_region_reads_some_columns_of_a_source_and_zeroes_the_rest() -> None:
    h = 8
    region = Region(
        width=h,
        source_widths=(4 * h, h),
        leaves=(Leaf(0, 0), Leaf(0, 2 * h), Leaf(1, 0)),
        instrs=(
            Instr("sigmoid", (0,)),
            Instr("sub", (Const(1.0), 3)),
            Instr("div", (Const(2.0), 2)),
            Instr("mul", (4, 1)),
            Instr("add", (6, 5)),
        ),
        outputs=(7, 4),
    )
    call = RegionCall(region)
    assert call.kernel is not None
    g = torch.Generator().manual_seed(3)
    z = torch.randn(5, 4 * h, generator=g).requires_grad_()
    x = (torch.rand(5, h, generator=g) + 0.5).requires_grad_()
    got, want = call(z, x), run_in_torch(region, [z, x])
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, **TOL)
    grads = [torch.randn(5, h, generator=g) for _ in range(2)]
    gz, gx = torch.autograd.grad(got, [z, x], grads)
    wz, wx = torch.autograd.grad(want, [z, x], grads)
    torch.testing.assert_close(gz, wz, **TOL)
    torch.testing.assert_close(gx, wx, **TOL)
    assert torch.count_nonzero(gz[:, h : 2 * h]) == 0 and torch.count_nonzero(gz[:, 3 * h :]) == 0


def test_second_derivatives_follow_torch() -> None:
    torch.manual_seed(0)
    cell = PlainCell(6)
    fusion, fn = PointwiseFusion([cell]), _cell_fn(cell)
    fusion(fn, _inputs(4, 6, 4))

    def grad_norm(run) -> torch.Tensor:
        args = _inputs(4, 6, 4, seed=7)
        h, c = run(*args)
        (g,) = torch.autograd.grad((h * c).sum(), [args[0]], create_graph=True)
        return torch.autograd.grad(g.square().sum(), [cell.gates.weight])[0]

    torch.testing.assert_close(grad_norm(lambda *a: fusion(fn, a)), grad_norm(fn), **TOL)


class Branchy(nn.Module):
    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        y = torch.sigmoid(x) * torch.tanh(x) + x
        return [y * 2 if bool(y.sum() > 0) else -y]


def test_python_branching_on_values_runs_as_written() -> None:
    m = Branchy()
    fusion = PointwiseFusion([m])
    x = torch.randn(5, 3)
    assert torch.equal(fusion(m, [x])[0], m(x)[0])
    assert list(fusion.bodies()) == [None]
    assert torch.equal(fusion(m, [-x.abs() - 1])[0], m(-x.abs() - 1)[0])


def test_broadcasts_and_float64_stay_torch_ops() -> None:
    def body(x: torch.Tensor) -> list[torch.Tensor]:
        per_row = x.sum(1, keepdim=True)  # (n, 1): broadcast over columns, not a row
        return [torch.tanh(torch.sigmoid(x * per_row) * x) - x]

    fusion = PointwiseFusion([])
    fusion(body, [torch.randn(3, 7)])
    (compiled,) = fusion.bodies()
    (call,) = _regions(compiled)
    assert [i.op for i in call.region.instrs] == ["sigmoid", "mul", "tanh", "sub"]
    _agree(fusion, body, [torch.randn(3, 7, requires_grad=True)], [])
    doubles = PointwiseFusion([])
    x = torch.randn(3, 7, dtype=torch.float64)
    assert torch.equal(doubles(body, [x])[0], body(x)[0])
    assert list(doubles.bodies()) == [None]


class Noisy(nn.Module):
    """Dropout, running statistics and pointwise ops: the checks must leave no trace."""

    def __init__(self) -> None:
        super().__init__()
        self.norm, self.drop = nn.BatchNorm1d(6), nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        y = self.drop(self.norm(x))
        return [torch.sigmoid(y) * torch.tanh(y) + torch.rand_like(y) * y]


def test_the_checks_leave_generators_and_buffers_as_they_were() -> None:
    x = torch.randn(9, 6)
    torch.manual_seed(5)
    fused_model = Noisy()
    fusion = PointwiseFusion([fused_model])
    got = fusion(fused_model, [x])[0]
    after_fused = torch.rand(3)
    torch.manual_seed(5)
    plain_model = Noisy()
    want = plain_model(x)[0]
    after_plain = torch.rand(3)
    torch.testing.assert_close(got, want, **TOL)
    assert torch.equal(after_fused, after_plain)
    assert torch.equal(fused_model.norm.running_mean, plain_model.norm.running_mean)
    assert int(fused_model.norm.num_batches_tracked) == 1
    assert list(fusion.bodies())[0] is not None  # it was fused, dropout and all


def test_runs_joined_only_where_no_cycle_follows() -> None:
    lin = nn.Linear(5, 5)

    def body(x: torch.Tensor) -> list[torch.Tensor]:
        a = torch.sigmoid(x) * x + 1
        b = lin(a)  # reads the first run: joining it to the second would make a cycle
        c = torch.tanh(a) * b
        return [torch.sigmoid(c) * c + a * 0.5]

    fusion = PointwiseFusion([lin])
    fusion(body, [torch.randn(4, 5)])
    (compiled,) = fusion.bodies()
    assert len(_regions(compiled)) == 2
    _agree(fusion, body, [torch.randn(4, 5, requires_grad=True)], list(lin.parameters()))


def _users_tree() -> tuple[fb.Block, nn.Module]:
    embed, leaf, cell = nn.Embedding(20, 8), PlainLeaf(8, 8), PlainCell(8)
    word = fb.GetItem(0) >> fb.Scalar("int64") >> fb.Function(embed) >> fb.Function(leaf)
    return binary_tree(word, cell) >> fb.GetItem(0), cell


def test_the_engine_fuses_a_users_cells_batched_equal_to_eager() -> None:
    torch.manual_seed(0)
    tree, _ = _users_tree()
    trees = [((1,), ((2,), (3,))), (((4,), (5,)), ((6,), (7,))), (9,), ((1,), (1,))]
    check_block(tree, trees)
    fused = [op for op, f in executor.fusions.items() if any(f.bodies())]
    assert {type(op.fn) for op in fused} >= {PlainLeaf, PlainCell}


def test_switched_off_the_bodies_run_as_written() -> None:
    native.set_fused_cells_enabled(False)
    try:
        tree, cell = _users_tree()
        Compiler(tree)([((1,), (2,))])[0].sum().backward()
        assert not any(op.fn is cell for op in executor.fusions)
    finally:
        native.set_fused_cells_enabled(None)


def _first_and_later(module: nn.Module, first: torch.Tensor, later: torch.Tensor) -> None:
    """fused == as written on a first batch and a later one, inputs left as the body leaves
    them."""
    fusion = PointwiseFusion([module])
    for x in (first, later):
        mine, theirs = x.clone(), x.clone()
        got, want = fusion(module, [mine]), module(theirs)
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, **TOL)
        assert torch.equal(mine, theirs)


class ScalesItsInput(nn.Module):
    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        x.mul_(2)
        return [torch.sigmoid(x) * x + 1]


def test_an_in_place_op_on_an_input_runs_once() -> None:
    _first_and_later(ScalesItsInput(), torch.randn(4, 6), torch.randn(4, 6))


class ClampsInPlace(nn.Module):
    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        a = x * 1.0 + 10
        a.relu_()  # changes nothing while x > -10: a first batch cannot tell
        return [torch.sigmoid(a) * x - a]


def test_an_in_place_op_on_an_intermediate_runs_as_written() -> None:
    _first_and_later(ClampsInPlace(), torch.randn(4, 6), torch.full((4, 6), -20.0))


class Scaled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(6))
        self.gain = 2.0

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        return [torch.sigmoid(x * self.weight) * x * self.gain + 1]


def _fused_once(m: nn.Module, x: torch.Tensor) -> PointwiseFusion:
    fusion = PointwiseFusion([m])
    fusion(m, [x])
    assert list(fusion.bodies())[0] is not None
    return fusion


def test_a_parameter_reassigned_after_the_first_call_is_used() -> None:
    m, x = Scaled(), torch.randn(4, 6)
    fusion = _fused_once(m, x)
    m.weight = nn.Parameter(torch.full((6,), 3.0))
    torch.testing.assert_close(fusion(m, [x])[0], m(x)[0], **TOL)


def test_a_python_attribute_changed_after_the_first_call_is_used() -> None:
    m, x = Scaled(), torch.randn(4, 6)
    fusion = _fused_once(m, x)
    m.gain = 5.0
    torch.testing.assert_close(fusion(m, [x])[0], m(x)[0], **TOL)


class Counted(Scaled):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        self.calls += 1
        return super().forward(x)


def test_a_body_that_counts_its_calls_counts_each_once() -> None:
    m = Counted()
    fusion = PointwiseFusion([m])
    for _ in range(3):
        fusion(m, [torch.randn(4, 6)])
    assert m.calls == 3


def test_a_region_read_before_its_last_source_is_made_is_still_one_kernel() -> None:
    first, second = nn.Linear(6, 6), nn.Linear(6, 6)

    def body(x: torch.Tensor) -> list[torch.Tensor]:
        a = torch.sigmoid(x)
        p = first(a)  # reads the region before ``second``'s output, its other source, exists
        y = second(x)
        return [a * y + 1 - a, p]

    fusion = PointwiseFusion([first, second])
    fusion(body, [torch.randn(3, 6)])
    (compiled,) = fusion.bodies()
    assert compiled is not None and len(_regions(compiled)) == 1
    _agree(fusion, body, [torch.randn(3, 6, requires_grad=True)], [first.weight, second.weight])


def test_exp_overflows_and_underflows_as_torch_does() -> None:
    def body(x: torch.Tensor) -> list[torch.Tensor]:
        return [1.0 / torch.exp(x) + torch.exp(x) * 0.5 - x]

    fusion = PointwiseFusion([])
    fusion(body, [torch.randn(2, 8)])
    assert fusion.bodies()[0] is not None
    x = torch.tensor([[-200.0, -100.0, -90.0, -1.0, 0.0, 1.0, 89.0, 200.0]] * 2)
    (got,), (want,) = fusion(body, [x]), body(x)
    assert torch.equal(torch.isinf(got), torch.isinf(want))
    torch.testing.assert_close(got[:, 2:7], want[:, 2:7], rtol=1e-5, atol=0)


class SlicedGates(nn.Module):
    """Gates cut with literal column slices, the projections summed with ``+=``."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(6, 12), nn.Linear(6, 12, bias=False)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        z = self.a(x)
        z += self.b(x)
        i, u, o = z[:, :4], z[:, 4:8], z[:, 8:]
        c = torch.sigmoid(i) * torch.tanh(u)
        return [torch.sigmoid(o) * torch.tanh(c), c]


def test_column_slices_are_read_in_place_and_a_fresh_sum_in_place_is_a_sum() -> None:
    torch.manual_seed(0)
    m = SlicedGates()
    fusion = PointwiseFusion([m])
    fusion(m, [torch.randn(5, 6)])
    (compiled,) = fusion.bodies()
    (call,) = _regions(compiled)
    assert call.region.source_widths == (12,) and len(call.region.instrs) == 6
    targets = [(n.target, n.args[1:]) for n in compiled.graph.nodes if n.op == "call_function"]
    assert not any(t is operator.getitem and isinstance(a[0], tuple) for t, a in targets)
    assert any(t is operator.add for t, _ in targets)  # the += of a fresh projection
    _agree(fusion, m, [torch.randn(5, 6, requires_grad=True)], list(m.parameters()))


class ExplicitBiases(nn.Module):
    """An LSTM-like cell with its biases added by hand: one ``(4H,)`` before the chunk, one
    ``(1, H)`` after."""

    def __init__(self, h: int = 6) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4 * h, h) / h)
        self.b = nn.Parameter(torch.randn(4 * h))
        self.peep = nn.Parameter(torch.randn(1, h))

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> list[torch.Tensor]:
        gates = torch.mm(x, self.w.t()) + self.b + 0.5 * x.repeat(1, 4)
        i, f, g, o = gates.chunk(4, 1)
        c = torch.sigmoid(f + self.peep) * c + torch.sigmoid(i) * torch.tanh(g)
        return [torch.sigmoid(o) * torch.tanh(c), c]


@pytest.mark.parametrize("first", [5, 1])
def test_a_bias_row_broadcast_over_the_rows_joins_the_region(first: int) -> None:
    torch.manual_seed(0)
    m = ExplicitBiases()
    fusion = PointwiseFusion([m])
    fusion(m, _inputs(first, 6, 2))  # a first batch of one row: the bias is no broadcast then
    (compiled,) = fusion.bodies()
    widths = sorted(call.region.width for call in _regions(compiled))
    assert widths == [6, 24]
    if first > 1:
        rows = [r for call in _regions(compiled) for r in call.region.row_sources]
        assert rows.count(True) == 2  # self.b and self.peep
    _agree(fusion, m, _inputs(7, 6, 2, seed=3), list(m.parameters()))


def test_inference_calls_the_kernel_without_recording_a_graph() -> None:
    torch.manual_seed(0)
    cell = PlainCell(8)
    fusion, fn = PointwiseFusion([cell]), _cell_fn(cell)
    with torch.no_grad():
        got, want = fusion(fn, _inputs(5, 8, 4)), fn(*_inputs(5, 8, 4))
    assert fusion.bodies()[0] is not None and all(g.grad_fn is None for g in got)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, **TOL)


def test_strided_pieces_are_copied_once_then_fused() -> None:
    lin = nn.Linear(6, 4 * 6)

    def body(x: torch.Tensor) -> list[torch.Tensor]:
        z = lin(x).view(-1, 6, 4)  # gates interleaved: column k of each group of four
        i, o, u = z[:, :, 0], z[:, :, 1], z[:, :, 2]
        c = torch.sigmoid(i) * torch.tanh(u)
        return [torch.sigmoid(o) * torch.tanh(c)]

    fusion = PointwiseFusion([lin])
    fusion(body, [torch.randn(3, 6)])
    (compiled,) = fusion.bodies()
    assert len(_regions(compiled)) == 1
    x = torch.randn(5, 6, requires_grad=True)
    (out,) = fusion(body, [x])
    assert type(out.grad_fn).__name__ == "_RegionFunctionBackward"  # the kernel, not torch's ops
    _agree(fusion, body, [x], list(lin.parameters()))
