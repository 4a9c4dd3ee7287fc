"""``Metric``: tensors collected from anywhere in a structure, batched, with gradients."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

import foldexp.blocks as fb
from foldexp import Compiler
from foldexp.models.paper import sparse_softmax_cross_entropy
from foldexp.testing import check_block


def test_metric_in_a_map_with_a_void_root(check_metrics: Callable[..., Any]) -> None:
    block = fb.Map(fb.Scalar() >> fb.Metric("x")) >> fb.Void()
    comp = check_metrics(block, [[0.0, 1.0, 2.0], [], [0.0, 1.0, 2.0, 3.0]], ["x"])
    values, index = comp.last_metrics["x"]
    assert values.tolist() == [0.0, 1.0, 2.0, 0.0, 1.0, 2.0, 3.0]
    assert index.tolist() == [0, 0, 0, 2, 2, 2, 2]
    assert repr(fb.Metric("x")) == "Metric('x')"


def test_metrics_beside_an_output(check_metrics: Callable[..., Any]) -> None:
    fc = fb.FC(2)
    block = fb.Map(fb.Vector(3) >> fb.Function(fc)) >> fb.AllOf(
        fb.Sum(), fb.Map(fb.Function(lambda v: v.sum(1)) >> fb.Metric("row")) >> fb.Void()
    )
    block = block >> fb.GetItem(0)
    xs = [np.ones((n, 3)).tolist() for n in [2, 0, 3]]
    check_block(block, xs)
    check_metrics(block, xs, ["row"])


def test_per_node_losses_on_recursive_trees(check_metrics: Callable[..., Any]) -> None:
    """SST's shape: a loss at every node, via a composition inside the recursion."""
    h = 4
    expr = fb.ForwardDeclaration(name="tree")
    leaf = fb.GetItem("word") >> fb.Scalar("int64") >> fb.Function(fb.Embedding(10, h))
    pair = fb.Record([("left", expr()), ("right", expr())]) >> fb.Concat() >> fb.FC(h)
    node = fb.OneOf(lambda t: "word" in t, {True: leaf, False: pair})
    logits = fb.Function(fb.FC(3, activation=None))
    c = fb.Composition(name="node")
    with c.scope():
        state = node.reads(c.input)
        label = fb.Scalar("int64").reads(c.input["label"])
        loss = fb.Function(sparse_softmax_cross_entropy).reads(logits.reads(state), label)
        fb.Metric("loss").reads(loss)
        c.output.reads(state)
    expr.resolve_to(c)

    rng = np.random.default_rng(1)

    def tree(n: int) -> dict:
        if n == 1:
            return {"word": int(rng.integers(10)), "label": int(rng.integers(3))}
        k = int(rng.integers(1, n))
        return {"left": tree(k), "right": tree(n - k), "label": int(rng.integers(3))}

    trees = [tree(n) for n in [1, 4, 2, 7]]
    comp = check_metrics(expr(), trees, ["loss"])
    assert comp.last_metrics["loss"][0].shape == (1 + 7 + 3 + 13,)  # one loss per node
    check_block(expr(), trees)


def test_metric_needs_a_tensor() -> None:
    with pytest.raises(TypeError, match=r"Metric\('m'\) expects a tensor as input, got TupleType"):
        Compiler(fb.AllOf(fb.Scalar(), fb.Scalar()) >> fb.Metric("m"))
    with pytest.raises(TypeError, match="non-empty name"):
        fb.Metric("")


def test_metric_values_flow_gradients_to_parameters() -> None:
    lin = torch.nn.Linear(1, 1)
    block = fb.Map(fb.Scalar() >> fb.Function(lambda x: x.unsqueeze(1)) >> fb.Function(lin))
    comp = Compiler(block >> fb.Map(fb.Function(lambda y: y[:, 0]) >> fb.Metric("y")) >> fb.Void())
    comp([[1.0, 2.0], [3.0]])
    comp.last_metrics["y"][0].sum().backward()
    assert lin.weight.grad is not None and float(lin.weight.grad) == pytest.approx(6.0)
