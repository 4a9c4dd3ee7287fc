"""``While`` and ``Unfold``: loops whose length is computed, batched == eager, values and
gradients, and batched the engine's way (one call per iteration over the instances still
running)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import foldexp.blocks as fb
from foldexp import Compiler
from foldexp.blocks._loops import loop_cap_fraction
from foldexp.testing import check_block
from foldexp.types import TensorType, TupleType


def _counter_while(max_iterations: int = 10, count: bool = True) -> fb.While:
    """State ``(h, c)``: ``h`` goes through a linear layer, ``c`` counts down to 0."""
    torch.manual_seed(0)
    body = fb.Record(
        [
            fb.Function(torch.nn.Linear(4, 4)) >> fb.Function(torch.tanh),
            fb.Function(lambda c: c - 1.0),
        ]
    )
    cond = fb.GetItem(1)  # a 0-d float, read as > 0
    return fb.While(cond, body, max_iterations=max_iterations, count=count)


def _counter_inputs(counts: list[int]) -> list[tuple[list[float], float]]:
    return [([0.1 * k, -0.2, 0.3, 0.05 * k], float(k)) for k in counts]


def test_while_counts_and_state_match_eager_with_gradients() -> None:
    loop = _counter_while()
    counts = [0, 1, 2, 3, 5, 2, 1, 7]
    block = fb.Record([fb.Vector(4) >> fb.FC(4), fb.Scalar()]) >> loop >> fb.GetItem(1)
    check_block(block, _counter_inputs(counts), expected=counts)
    full = fb.Record([fb.Vector(4) >> fb.FC(4), fb.Scalar()]) >> _counter_while()
    comp = check_block(full, _counter_inputs(counts))  # state and count, gradients too
    values, index = comp.last_metrics["While.iterations"]
    assert values.tolist() == counts and index.tolist() == list(range(len(counts)))


def test_while_runs_one_call_per_iteration_over_the_active_instances() -> None:
    sizes: list[int] = []

    def step(x: torch.Tensor) -> torch.Tensor:
        sizes.append(x.shape[0])
        return x - 1.0

    loop = fb.While(fb.Function(lambda x: x), fb.Function(step), max_iterations=20)
    comp = Compiler(fb.Scalar() >> loop)
    sizes.clear()  # Function's type inference called it once
    out = comp([1.0, 2.0, 3.0, 3.5, 5.0, 0.0])
    assert out.tolist() == [0.0, 0.0, 0.0, -0.5, 0.0, 0.0]
    # Work follows each instance's iterations (15 in all), not 6 × 5.
    assert sizes == [5, 4, 3, 2, 1]
    assert comp.last_stats["calls"] == 1  # the loop is one call of the batch's plan


def test_while_with_a_bool_condition_and_max_iterations_reached() -> None:
    loop = fb.While(
        fb.Function(lambda x: x.sum(-1) < 100.0),
        fb.Function(torch.nn.Linear(3, 3)) >> fb.Function(lambda x: x.abs() + 1.0),
        max_iterations=4,
        count=True,
        name="grow",
    )
    inputs = [[0.0, 0.0, 0.0], [200.0, 0.0, 0.0], [1.0, 2.0, 3.0]]
    comp = check_block(fb.Vector(3) >> loop, inputs)
    values, _ = comp.last_metrics["grow.iterations"]
    assert values.tolist() == [4, 0, 4]
    assert loop_cap_fraction(comp.last_metrics, loop) == (2, 3)


def test_while_over_a_nested_tuple_state_inside_map() -> None:
    torch.manual_seed(1)
    # State (h, (n, m)): h through a layer, n halves, m accumulates h.
    body = fb.AllOf(
        fb.GetItem(0) >> fb.Function(torch.nn.Linear(2, 2)),
        fb.AllOf(
            fb.GetItem(1) >> fb.GetItem(0) >> fb.Function(lambda n: n * 0.5),
            fb.Record([fb.Identity(), fb.GetItem(1)]) >> fb.Function(lambda h, m: h + m),
        ),
    )
    state = fb.Record([fb.Vector(2), fb.Record([fb.Scalar(), fb.Vector(2)])])
    cond = fb.GetItem(1) >> fb.GetItem(0) >> fb.Function(lambda n: n - 1.0)
    loop = fb.While(cond, body, 8)
    block = fb.Map(state >> loop >> fb.GetItem(1) >> fb.GetItem(1)) >> fb.Sum()
    inputs = [
        [([1.0, 2.0], (4.0, [0.0, 0.0])), ([0.5, -1.0], (1.0, [1.0, 1.0]))],
        [([0.0, 1.0], (16.0, [0.5, 0.0]))],
        [],
    ]
    check_block(block, inputs)


def test_nested_while() -> None:
    torch.manual_seed(2)
    inner = fb.While(
        fb.GetItem(1) >> fb.Function(lambda c: c - 0.5),
        fb.Record([fb.Function(torch.nn.Linear(3, 3)), fb.Function(lambda c: c - 1.0)]),
        max_iterations=6,
    )
    # Each outer iteration runs the inner loop from a budget of the outer counter's value.
    outer_body = fb.AllOf(inner >> fb.GetItem(0), fb.GetItem(1) >> fb.Function(lambda c: c - 1.0))
    outer = fb.While(fb.GetItem(1), outer_body, max_iterations=6, count=True)
    block = fb.Record([fb.Vector(3), fb.Scalar()]) >> outer
    inputs = [([0.1, 0.2, 0.3], float(k)) for k in [0, 1, 2, 3, 4]]
    comp = check_block(block, inputs)
    assert comp.last_metrics["While.iterations"][0].tolist() == [0, 1, 2, 3, 4]


def _tree(n: int, rng: np.random.Generator) -> tuple:
    if n == 1:
        return (int(rng.integers(8)),)
    k = int(rng.integers(1, n))
    return (_tree(k, rng), _tree(n - k, rng))


def test_while_inside_recursion_over_trees(rng: np.random.Generator) -> None:
    torch.manual_seed(3)
    n = 4
    refine = fb.While(
        fb.Function(lambda h: h.abs().sum(-1) > 0.6),
        fb.Function(torch.nn.Linear(n, n)) >> fb.Function(lambda h: 0.7 * torch.tanh(h)),
        max_iterations=5,
    )
    expr = fb.ForwardDeclaration()
    leaf = fb.GetItem(0) >> fb.OneHot(8) >> fb.FC(n)
    pair = fb.Record((expr(), expr())) >> fb.Function(torch.add) >> refine
    expr.resolve_to(fb.OneOf(len, [(1, leaf), (2, pair)]))
    trees = [_tree(k, rng) for k in [1, 2, 3, 6, 11, 7]]
    comp = check_block(expr(), trees)
    counts = comp.last_metrics["While.iterations"][0]
    assert counts.numel() == sum(k - 1 for k in [1, 2, 3, 6, 11, 7])  # one per inner node
    assert len(set(counts.tolist())) > 1  # lengths really differ


def _decoder(max_length: int = 6) -> tuple[fb.Unfold, fb.Block]:
    """``Unfold`` over ``(h, budget)``: emits ``h``'s sum until the budget runs out."""
    torch.manual_seed(4)
    lin = torch.nn.Linear(4, 4)

    class Step(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = lin

        def forward(self, h: torch.Tensor, b: torch.Tensor) -> tuple:
            h2 = torch.tanh(self.lin(h))
            return (h2, b - 1.0), h2.sum(-1), b <= 1.0

    unfold = fb.Unfold(fb.Function(Step()), max_length=max_length)
    return unfold, fb.Record([fb.Vector(4) >> fb.FC(4), fb.Scalar()]) >> unfold


_BUDGETS = [1, 2, 3, 9, 4, 2, 0]


def _unfold_inputs() -> list[tuple[list[float], float]]:
    return [([0.1 * k, 0.2, -0.3, 0.4], float(k)) for k in _BUDGETS]


@pytest.mark.parametrize(
    "tail",
    [
        fb.Map(fb.Function(lambda y: y * 2.0)) >> fb.Sum(),
        fb.Fold(fb.Function(lambda s, y: s * 0.5 + y), fb.FromTensor(torch.tensor(0.0))),
        fb.Reduce(fb.Function(torch.add)),
        fb.Nth(0),
    ],
    ids=["map-sum", "fold", "reduce", "nth"],
)
def test_unfold_feeds_sequence_blocks(tail: fb.Block) -> None:
    _, head = _decoder()
    comp = check_block(head >> tail, _unfold_inputs())
    assert comp.last_stats["stages"] == 2  # the probes, then the plan with every length


def test_unfold_lengths_and_max_length() -> None:
    unfold, head = _decoder(max_length=6)
    lengths = [max(1, min(b, 6)) for b in _BUDGETS]
    check_block(head >> fb.Length("int64"), _unfold_inputs(), expected=lengths)
    assert [len(head.eval(x)) for x in _unfold_inputs()] == lengths


def test_nested_unfold_takes_more_stages() -> None:
    """An ``Unfold`` per element of another's output: probed on an empty stand-in first."""
    torch.manual_seed(5)
    inner = fb.Unfold(
        fb.Function(lambda b: (b - 1.0, b * 2.0, b <= 1.0)), max_length=5, name="inner"
    )
    outer = fb.Unfold(fb.Function(lambda b: (b - 1.0, b, b <= 1.0)), max_length=5, name="outer")
    scale = fb.Function(torch.nn.Linear(1, 1)) >> fb.Function(lambda x: x.squeeze(-1).abs() + 0.5)
    block = fb.Vector(1) >> scale >> outer >> fb.Map(inner >> fb.Sum()) >> fb.Sum()
    inputs = [[1.0], [2.0], [3.5]]
    comp = check_block(block, inputs)
    assert comp.last_stats["stages"] >= 3


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: fb.While(fb.Identity(), fb.Identity(), 3), r"While\(.*cond must output a scalar"),
        (
            lambda: fb.While(fb.Function(lambda x: x.long().sum(-1)), fb.Identity(), 3),
            r"cond must output a scalar bool",
        ),
        (
            lambda: fb.While(fb.Function(lambda x: x.sum(-1)), fb.Function(lambda x: x[:, :1]), 3),
            r"While\(.*body must output the state's type TensorType\(\(2,\)",
        ),
        (
            lambda: fb.Unfold(fb.Function(lambda x: (x, x)), 3),
            r"Unfold\(.*step must output a tuple \(state, element, stop\)",
        ),
        (
            lambda: fb.Unfold(fb.Function(lambda x: (x, x, x)), 3),
            r"Unfold\(.*step's stop must output a scalar",
        ),
    ],
)
def test_typed_errors_name_the_block(make, match: str) -> None:  # noqa: ANN001
    with pytest.raises(TypeError, match=match):
        Compiler(fb.Vector(2) >> make())


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, None])
def test_limits_must_be_positive_integers(bad: object) -> None:
    with pytest.raises(ValueError, match=r"While\(.*max_iterations must be an integer >= 1"):
        fb.While(fb.Identity(), fb.Identity(), bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"Unfold\(.*max_length must be an integer >= 1"):
        fb.Unfold(fb.Identity(), bad)  # type: ignore[arg-type]


def test_state_must_be_tensors_and_metrics_stay_outside() -> None:
    with pytest.raises(TypeError, match=r"a loop's state must be a tensor"):
        Compiler(fb.While(fb.Identity(), fb.Identity(), 2))  # a Python object
    body = fb.AllOf(fb.Function(lambda x: x.sum(-1)) >> fb.Metric("m"), fb.Identity())
    loop = fb.While(fb.Function(lambda x: x.sum(-1)), body >> fb.GetItem(1), 2)
    with pytest.raises(TypeError, match=r"Metric\('m'\) inside a loop's cond, body or step"):
        Compiler(fb.Vector(2) >> loop)([[1.0, 0.0]])
    assert TupleType(TensorType(2), TensorType((), torch.int64)) == (
        Compiler(
            fb.Vector(2) >> fb.While(fb.Function(lambda x: x.sum(-1)), fb.Identity(), 2, count=True)
        ).output_type  # fmt: skip
    )


def test_loop_caps_are_summed_and_reported_once(caplog: pytest.LogCaptureFixture) -> None:
    from foldexp.train.fit import _report_loop_caps

    loop = fb.While(fb.Function(lambda x: x), fb.Function(lambda x: x - 1.0), 3, name="down")
    comp = Compiler(fb.Scalar() >> loop)
    comp([1.0, 2.0, 9.0])
    comp([5.0, 0.0])
    assert comp.loop_caps is not None and comp.loop_caps.counts == [[2, 5]]
    taken = {"capped_down": 0.5}  # another compiler's loop of that name
    assert comp.loop_caps.fractions(taken) == {"capped_down": 0.5, "capped_down#2": 0.4}
    with caplog.at_level("WARNING", logger="foldexp.train"):
        _report_loop_caps(torch.nn.ModuleList([comp]), 4)
        _report_loop_caps(torch.nn.ModuleList([comp]), 5)  # reset: nothing new to say
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "epoch 4: While(" in lines[0] and "2 of 5 instances" in lines[0]
    assert "name='down'" in lines[0] and "max_iterations=3" in lines[0]


def test_while_inside_an_unfold_step_and_unfold_inside_a_loop_is_refused() -> None:
    torch.manual_seed(6)
    halve = fb.While(
        fb.Function(lambda x: x.abs() > 1.0), fb.Function(lambda x: x * 0.5), max_iterations=9
    )
    # Each step halves the state until |x| <= 1, emits it, doubles it plus a learned shift.
    shift = fb.Function(torch.nn.Linear(1, 1)) >> fb.Function(lambda x: x.squeeze(-1))
    step = fb.AllOf(
        halve >> fb.Function(lambda x: x * 3.0),
        halve,
        halve >> fb.Function(lambda x: x < 0.5),
    )
    unfold = fb.Unfold(step, max_length=6)
    block = fb.Vector(1) >> shift >> unfold >> fb.Sum()
    check_block(block, [[0.3], [4.0], [-7.0], [2.5]])
    inner = fb.Unfold(fb.Function(lambda x: (x, x, x > 0)), 3)
    with pytest.raises(TypeError, match=r"While\(.*an Unfold inside a loop's cond, body or step"):
        Compiler(
            fb.Vector(1) >> fb.While(fb.Function(lambda x: x.sum(-1) > 0), inner >> fb.Nth(0), 3)
        )


def test_unfold_occurrences_at_max_length_are_counted() -> None:
    unfold = fb.Unfold(fb.Function(lambda b: (b - 1.0, b, b <= 1.0)), max_length=3, name="u")
    comp = Compiler(fb.Scalar() >> unfold >> fb.Sum())
    assert comp([1.0, 2.0, 5.0, 9.0]).tolist() == [1.0, 3.0, 12.0, 24.0]
    assert comp.loop_caps is not None and comp.loop_caps.counts == [[2, 4]]
    (line,) = comp.loop_caps.report()
    assert line.startswith("Unfold(") and "2 of 4 instances (50.0%) stopped at max_length=3" in line


def test_an_unfold_fed_by_another_is_checked_and_corrected() -> None:
    """``second`` reads a Fold over ``first``'s output: the first stage probes it on the empty
    stand-in (the Fold's start, 0), a wrong length that the stop values then correct."""
    torch.manual_seed(7)
    first = fb.Unfold(fb.Function(lambda b: (b - 1.0, b, b <= 1.0)), max_length=6, name="first")
    second = fb.Unfold(fb.Function(lambda b: (b - 2.0, b, b <= 2.0)), max_length=9, name="second")
    total = fb.Fold(fb.Function(torch.add), fb.FromTensor(torch.tensor(0.0)))
    shift = fb.Function(torch.nn.Linear(1, 1)) >> fb.Function(lambda x: x.squeeze(-1).abs() + 1)
    block = fb.Vector(1) >> shift >> first >> total >> second >> fb.Sum()
    comp = check_block(block, [[1.0], [2.0], [3.0], [0.5]])
    assert comp.last_stats["stages"] >= 3
    lengths = [
        len((fb.Vector(1) >> shift >> first >> total >> second).eval([x])) for x in [1.0, 3.0]
    ]
    assert max(lengths) > 1  # the second loop's lengths are not the stand-in's


@pytest.mark.parametrize("seed", range(4))
def test_partition_by_nonzero_and_by_sort_agree(seed: int) -> None:
    from foldexp.blocks._loop_ops import partition, sorted_partition

    keep = torch.from_numpy(np.random.default_rng(seed).random(37) < 0.3 * (seed + 1))
    n_keep = int(keep.sum())
    want = (torch.arange(37)[keep], torch.arange(37)[~keep])
    for got in (partition(keep, n_keep), sorted_partition(keep, n_keep)):  # CPU, GPU's way
        assert [g.tolist() for g in got] == [w.tolist() for w in want]


def test_while_whose_instances_all_reach_the_limit_or_all_stop_at_once() -> None:
    state = fb.Record([fb.Vector(4) >> fb.FC(4), fb.Scalar()])
    comp = check_block(state >> _counter_while(3), _counter_inputs([5, 4, 3, 7]))
    assert comp.last_metrics["While.iterations"][0].tolist() == [3, 3, 3, 3]
    comp = check_block(state >> _counter_while(9), _counter_inputs([2, 2, 2]))
    assert comp.last_metrics["While.iterations"][0].tolist() == [2, 2, 2]


def test_a_copied_loop_runs_the_copys_parameters() -> None:
    import copy

    comp = Compiler(fb.Record([fb.Vector(4), fb.Scalar()]) >> _counter_while() >> fb.GetItem(0))
    inputs = _counter_inputs([1, 3, 2])
    before = comp(inputs)[0]
    twin = copy.deepcopy(comp)
    with torch.no_grad():
        for p in twin.parameters():
            p.add_(0.5)
    assert torch.equal(comp(inputs)[0], before)  # the original's loop is untouched
    assert not torch.allclose(twin(inputs)[0], before)  # the copy's loop runs the copy's weights


def test_one_host_read_per_iteration() -> None:
    from foldexp.bench.overhead import count_ops

    loop = _counter_while(max_iterations=10)
    Compiler(fb.Record([fb.Vector(4), fb.Scalar()]) >> loop)  # types the loop
    counts = [0, 1, 3, 2, 5, 5, 1]
    h, c = torch.randn(len(counts), 4), torch.tensor(counts, dtype=torch.float32)
    ops = count_ops(lambda: loop._run([h, c]))
    # each iteration's condition, read once for all (the rows are then split by it: syncs on
    # CUDA too, ``ops.syncs``, but no further read)
    assert ops.ops["_local_scalar_dense"] == max(counts) + 1
    assert loop._run([h, c])[-1].tolist() == counts


def test_a_users_torch_function_mode_still_sees_the_loops_body() -> None:
    """The loop steps out of foldexp's own linear route only: a user's mode (a profiler,
    ``with torch.device(...)``) sees the body's calls at every iteration."""
    from torch.overrides import TorchFunctionMode

    from foldexp.kernels.dense import routed_linears

    class Seen(TorchFunctionMode):
        def __init__(self) -> None:
            super().__init__()
            self.tanh = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            self.tanh += func is torch.tanh
            return func(*args, **(kwargs or {}))

    comp = Compiler(fb.Record([fb.Vector(4), fb.Scalar()]) >> _counter_while())
    inputs = _counter_inputs([3, 1, 0, 2])
    expected = comp(inputs)
    with Seen() as seen, routed_linears():
        got = comp(inputs)
    assert seen.tanh == 3  # one call per iteration over the instances still running
    torch.testing.assert_close(got, expected)
