"""The engine's own promises: launches grow with depth not nodes, plans are plain data, and the
inference path equals the training path."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import foldexp.blocks as fb
from foldexp import Compiler
from foldexp.models.tree_lstm import random_tree, tree_lstm_classifier
from foldexp.testing import assert_compilers_agree


def balanced_tree(n_leaves: int, rng: np.random.Generator) -> tuple:
    if n_leaves == 1:
        return (int(rng.integers(50)),)
    half = n_leaves // 2
    return (balanced_tree(half, rng), balanced_tree(n_leaves - half, rng))


@pytest.mark.parametrize("fuse", [False, True])
def test_each_op_runs_at_most_once_per_depth_on_256_balanced_trees(rng, fuse: bool) -> None:
    model = Compiler(tree_lstm_classifier(50, 8, 8, 5), fuse_ops=fuse)
    trees = [balanced_tree(128, rng) for _ in range(256)]
    plan = model.build(trees)
    pairs = [(g.op, g.depth) for g in plan.groups]
    assert len(pairs) == len(set(pairs))
    if fuse:  # embedding >> leaf cell as one op, 7 levels of the binary cell, output layer
        assert (plan.max_depth, plan.num_calls) == (9, 9)
        assert plan.num_nodes == 256 * (128 + 127 + 1)
    else:  # embedding, leaf cell, 7 levels of the binary cell, output layer
        assert (plan.max_depth, plan.num_calls) == (10, 10)
        assert plan.num_nodes == 256 * (128 + 128 + 127 + 1)
    one = model.build(trees[:1])
    assert one.num_calls == plan.num_calls  # launches do not grow with the batch


def test_calls_follow_depth_not_node_count_on_random_trees(rng) -> None:
    model = Compiler(tree_lstm_classifier(50, 8, 8, 5))
    trees = [random_tree(64, 50, rng) for _ in range(64)]
    plan = model.build(trees)
    assert plan.num_calls <= len(model.ops) * plan.max_depth
    assert plan.num_calls < plan.num_nodes / 100


def test_schedule_is_printable(rng) -> None:
    model = Compiler(tree_lstm_classifier(50, 8, 8, 5))
    text = model.build([balanced_tree(4, rng) for _ in range(3)]).describe()
    lines = text.splitlines()
    assert lines[0].startswith("schedule: 3 inputs")
    assert any("BinaryTreeLSTMCell" in ln and "x6" in ln and "4x(8,)" in ln for ln in lines)
    assert any("Embedding >> TreeLSTMLeaf" in ln and "x12" in ln for ln in lines)  # fused
    assert len(lines) == 1 + 4  # embedding >> leaf, 2 cell levels, output


def test_plan_pickles_and_runs_after_round_trip(rng) -> None:
    model = Compiler(tree_lstm_classifier(50, 8, 8, 5))
    trees = [random_tree(n, 50, rng) for n in [3, 9, 1]]
    plan = pickle.loads(pickle.dumps(model.build(trees)))
    torch.testing.assert_close(model.run(plan), model(trees))


def test_no_grad_path_equals_grad_path(rng) -> None:
    model = Compiler(tree_lstm_classifier(50, 8, 8, 5))
    trees = [random_tree(n, 50, rng) for n in [2, 9, 17, 33]]
    with torch.no_grad():
        a = model(trees)
    b = model(trees)
    assert b.requires_grad and not a.requires_grad
    torch.testing.assert_close(a, b)


def test_training_reduces_loss(rng) -> None:
    model = Compiler(tree_lstm_classifier(20, 8, 16, 2))
    trees = [random_tree(int(rng.integers(1, 8)), 20, rng) for _ in range(32)]

    def leftmost(t: tuple) -> int:
        return t[0] if len(t) == 1 else leftmost(t[0])

    labels = torch.tensor([leftmost(t) % 2 for t in trees])
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    losses = []
    for _ in range(30):
        opt.zero_grad()
        loss = F.cross_entropy(model(trees), labels)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_gradients_reach_parameters_used_twice() -> None:
    fc = fb.FC(3, activation=torch.tanh)
    block = fb.Vector(3) >> fb.Function(fc) >> fb.Function(fc)
    from foldexp.testing import check_block

    check_block(block, [[1.0, 2.0, 3.0], [0.0, -1.0, 0.5]])


def test_last_stats_are_reported(rng) -> None:
    model = Compiler(tree_lstm_classifier(50, 8, 8, 5))
    model([random_tree(5, 50, rng)])
    stats = model.last_stats
    # 5 leaves (embedding >> leaf cell, fused), 4 internal nodes, the output layer
    assert stats["calls"] > 0 and stats["max_depth"] >= 3 and stats["nodes"] == 5 + 4 + 1
    assert stats["trace"] >= 0 and stats["schedule"] >= 0 and stats["execute"] > 0


def test_trace_cache_gives_identical_results_and_gradients(rng) -> None:
    block = tree_lstm_classifier(50, 8, 8, 5)
    plain = Compiler(block)
    cached = Compiler(block, cache_traces=True)
    trees = [random_tree(int(n), 50, rng) for n in rng.integers(1, 30, size=12)]
    for batch in (trees[:5], trees[3:], trees[::-1], trees[:5]):
        assert_compilers_agree(plain, cached, batch)
    assert len(cached.trace_cache) == len(trees)


def test_trace_cache_keeps_metrics_and_input_errors(rng) -> None:
    elem = fb.Scalar() >> fb.AllOf(fb.Identity(), fb.Metric("x")) >> fb.GetItem(0)
    model = Compiler(fb.Map(elem) >> fb.Reduce(fb.Function(torch.add)), cache_traces=True)
    xs = [[1.0, 2.0], [3.0], [4.0, 5.0, 6.0]]
    model(xs)
    out = model(xs[::-1])
    values, inputs = model.last_metrics["x"]
    torch.testing.assert_close(out, torch.tensor([15.0, 3.0, 3.0]))
    torch.testing.assert_close(values, torch.tensor([4.0, 5.0, 6.0, 3.0, 1.0, 2.0]))
    assert inputs.tolist() == [0, 0, 0, 1, 2, 2]
    with pytest.raises(fb.InputError, match=r"at input\[1\]\[0\]"):
        model([[1.0], ["bad"]])


def test_trace_cache_reuses_one_trace_without_leaking_between_inputs() -> None:
    # A metric recorded by some inputs only, and a shared zeros constant: a reused trace must
    # not carry either over from one input to the next.
    big = fb.Scalar() >> fb.AllOf(fb.Identity(), fb.Metric("big")) >> fb.GetItem(0)
    small = fb.AllOf(fb.Scalar(), fb.Zeros(())) >> fb.Function(torch.add)
    block = fb.OneOf(lambda x: x > 2, {True: big, False: small})
    plain, cached = Compiler(block), Compiler(block, cache_traces=True)
    for batch in ([1.0, 5.0, 2.0], [1.0, 2.0], [5.0, 7.0], [2.0, 5.0, 7.0, 1.0]):
        torch.testing.assert_close(cached(batch), plain(batch))
        assert cached.last_metrics.keys() == plain.last_metrics.keys()
        for name, (values, inputs) in plain.last_metrics.items():
            torch.testing.assert_close(cached.last_metrics[name][0], values)
            assert cached.last_metrics[name][1].tolist() == inputs.tolist()


def test_integer_slices_saved_for_backward_survive_later_buffer_writes() -> None:
    # The embedding reads its ids as a contiguous slice of the int64 buffer; later groups write
    # int64 outputs into the same buffer before backward runs.
    emb = fb.Embedding(10, 3)
    chain = fb.Function(lambda x: x + 1) >> fb.Function(lambda x: x * 2)
    block = fb.Scalar("int64") >> fb.AllOf(fb.Function(emb), chain) >> fb.GetItem(0)
    from foldexp.testing import check_block

    check_block(block, [1, 3, 4], expected=[emb.weight[i].detach() for i in (1, 3, 4)])


class _RowSum(torch.nn.Module):
    """Declares (3,) but returns (n, 1): the buffer write broadcasts it."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x @ self.w).sum(1, keepdim=True)


@pytest.mark.parametrize("create_graph", [False, True])
def test_an_output_of_another_shape_than_declared_fails_alike_either_way(create_graph) -> None:
    """The sweep's gradients go through autograd's engine entry point, which would sum a
    broadcast gradient down silently: such outputs take the public call, which names them,
    with or without ``create_graph``."""
    from foldexp.types import TensorType

    m = _RowSum()
    declared = TensorType((3,), torch.float32)
    model = Compiler(fb.Map(fb.Vector(3) >> fb.Function(m, output_type=declared)) >> fb.Sum())
    xs = [[[1.0, 2.0, 3.0], [0.5, 0.0, 1.0]], [[2.0, 1.0, 0.0]]]
    with pytest.raises(RuntimeError, match="Mismatch in shape"):
        torch.autograd.grad(model(xs).pow(2).sum(), [m.w], create_graph=create_graph)


def test_a_second_backward_through_one_execution_is_named(rng) -> None:
    model = Compiler(tree_lstm_classifier(50, 8, 8, 5))
    loss = model([random_tree(5, 50, rng)]).sum()
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="backpropagated once"):
        loss.backward()


def test_device_is_the_first_parameters_device() -> None:
    # ``Compiler.device`` reads the first layer's own parameter where it has one, else walks
    # ``parameters()``: either way the device of the first parameter in their order.
    cell = torch.nn.Sequential(torch.nn.Linear(4, 4))
    head = torch.nn.Linear(4, 2)
    block = fb.Map(fb.Vector(4) >> fb.Function(cell)) >> fb.Sum() >> fb.Function(head)
    model = Compiler(block)
    cell.to("meta")
    assert model.device == next(model.parameters()).device == torch.device("meta")
    model.to_empty(device="cpu")
    assert model.device == torch.device("cpu")
