"""Every core block through the oracle helper: expected == eager == batched, with gradients."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

import foldexp.blocks as fb
from foldexp.testing import check_block


def test_scalar_function_doubles() -> None:
    block = fb.Scalar() >> fb.Function(lambda x: 2 * x)
    check_block(block, [1.0, -2.5, 3.0], expected=[2.0, -5.0, 6.0], expected_depth=1)


def test_tensor_and_vector_inputs(rng: np.random.Generator) -> None:
    xs = [rng.normal(size=(2, 3)).astype(np.float32) for _ in range(4)]
    block = fb.Tensor([2, 3]) >> fb.Function(lambda t: t.sum(dim=2))
    check_block(block, xs, expected=[x.sum(axis=1) for x in xs])
    check_block(fb.Vector(3) >> fb.FC(4), [[1, 2, 3], [0, 0, 1]])


def test_function_on_a_pair_spreads_arguments() -> None:
    block = fb.AllOf(fb.Scalar(), fb.Scalar() >> fb.Function(torch.neg)) >> fb.Function(torch.add)
    check_block(block, [1.0, 5.0], expected=[0.0, 0.0], expected_depth=2)


def test_record_dict_and_concat() -> None:
    block = fb.Record({"a": fb.Vector(2), "b": fb.Vector(3)}) >> fb.Concat() >> fb.FC(3)
    xs = [{"a": [1, 2], "b": [3, 4, 5]}, {"a": [0, 0], "b": [1, 1, 1]}]
    check_block(block, xs)
    plain = fb.Record({"a": fb.Vector(2), "b": fb.Vector(3)}) >> fb.Concat()
    check_block(plain, xs, expected=[[1, 2, 3, 4, 5], [0, 0, 1, 1, 1]], expected_depth=1)


def test_map_fold_rnn_on_sequences_of_many_lengths(rng: np.random.Generator) -> None:
    cell = fb.Concat() >> fb.FC(6, activation=torch.tanh)
    block = fb.Map(fb.Vector(4)) >> fb.Fold(cell, fb.Zeros(6))
    xs = [rng.normal(size=(n, 4)).tolist() for n in [0, 1, 2, 5, 9, 3]]
    check_block(block, xs, expected_depth=[0, 2, 4, 10, 18, 6])


def test_fold_sums_scalars() -> None:
    block = fb.Map(fb.Scalar()) >> fb.Fold(fb.Function(torch.add), fb.Zeros(()))
    xs = [[1.0, 2.0, 3.0], [], [4.5]]
    check_block(block, xs, expected=[6.0, 0.0, 4.5], expected_depth=[3, 0, 1])


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 13])
def test_reduce_is_balanced(n: int) -> None:
    block = fb.Map(fb.Scalar()) >> fb.Reduce(fb.Function(torch.add))
    xs = [list(map(float, range(n))), [1.0] * n]
    check_block(
        block, xs, expected=[sum(range(n)), float(n)], expected_depth=math.ceil(math.log2(n))
    )


def test_reduce_with_default_on_empty() -> None:
    block = fb.Map(fb.Scalar()) >> fb.Reduce(fb.Function(torch.maximum), fb.Zeros(()))
    check_block(block, [[], [3.0, 1.0, 2.0]], expected=[0.0, 3.0])


def test_oneof_dispatches_on_key() -> None:
    block = fb.OneOf(
        lambda x: x["kind"],
        {
            "num": fb.GetItem("v") >> fb.Scalar() >> fb.Function(lambda t: t.unsqueeze(1)),
            "vec": fb.GetItem("v") >> fb.Vector(1) >> fb.FC(1),
        },
    )
    xs = [{"kind": "num", "v": 2.0}, {"kind": "vec", "v": [1.0]}, {"kind": "num", "v": -1.0}]
    check_block(block, xs)


def test_optional_uses_zeros_for_none() -> None:
    block = fb.Optional(fb.Vector(2) >> fb.FC(3))
    check_block(block, [[1.0, 2.0], None, [0.5, 0.5]])
    assert torch.equal(block.eval(None), torch.zeros(3))


def test_embedding_lookup_and_tuple_output() -> None:
    emb = fb.Embedding(10, 4)
    block = fb.Scalar("int64") >> fb.Function(emb) >> fb.AllOf(fb.Identity(), fb.FC(2))
    check_block(block, [0, 3, 9, 3], expected=None)
    assert torch.equal(block.eval(3)[0], emb.weight[3])


def test_embedding_initializer_and_frozen() -> None:
    init = np.arange(12, dtype=np.float32).reshape(6, 2)
    block = fb.Scalar("int64") >> fb.Function(fb.Embedding(6, 2, initializer=init, trainable=False))
    check_block(block, [1, 5], expected=[init[1], init[5]])


def _random_tree(n: int, rng: np.random.Generator) -> tuple:
    if n == 1:
        return (int(rng.integers(20)),)
    k = int(rng.integers(1, n))
    return (_random_tree(k, rng), _random_tree(n - k, rng))


def _tree_depth(t: tuple) -> int:
    return 0 if len(t) == 1 else 1 + max(_tree_depth(t[0]), _tree_depth(t[1]))


def test_tree_rnn_on_random_trees(rng: np.random.Generator) -> None:
    h = 5
    tree = fb.ForwardDeclaration()
    leaf = fb.GetItem(0) >> fb.Scalar("int64") >> fb.Function(fb.Embedding(20, h))
    pair = fb.Record((tree(), tree())) >> fb.Concat() >> fb.FC(h, activation=torch.tanh)
    tree.resolve_to(fb.OneOf(len, [(1, leaf), (2, pair)]))
    trees = [_random_tree(n, rng) for n in [1, 2, 3, 7, 16, 5, 30]]
    check_block(tree(), trees, expected_depth=[1 + 2 * _tree_depth(t) for t in trees])


def test_tree_lstm_model_values_and_gradients(rng: np.random.Generator) -> None:
    from foldexp.models.tree_lstm import random_tree, tree_lstm_classifier

    block = tree_lstm_classifier(vocab_size=30, embed_size=6, hidden_size=7, num_classes=3)
    trees = [random_tree(n, 30, rng) for n in [1, 2, 4, 9, 17, 3, 64]]
    check_block(block, trees, expected_depth=[3 + _tree_depth(t) for t in trees])


def test_nn_module_parameters_become_compiler_parameters() -> None:
    lin = nn.Linear(3, 2)
    comp = check_block(fb.Vector(3) >> fb.Function(lin), [[1, 2, 3]])
    assert {id(p) for p in comp.parameters()} == {id(lin.weight), id(lin.bias)}


def test_nested_tuple_inputs_to_function() -> None:
    def f(a: tuple[torch.Tensor, torch.Tensor], b: torch.Tensor) -> torch.Tensor:
        return a[0] * a[1] + b

    block = fb.AllOf(fb.AllOf(fb.Scalar(), fb.Scalar()), fb.Scalar()) >> fb.Function(f)
    check_block(block, [2.0, 3.0], expected=[6.0, 12.0])
