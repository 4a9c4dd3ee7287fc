"""One small case per block family and per model of ``foldexp.models``: a block and a batch of
inputs, for the tests that run them on another device (``test_devices.py``: the meta device on
any machine, CUDA where there is one).

Each case is built afresh by its function (fresh parameters, seeded), since a test moves the
model's parameters.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

import foldexp.blocks as fb
from foldexp.data.trees import Tree
from foldexp.data.vocab import Vocabulary
from foldexp.models.attention import attention_network
from foldexp.models.child_sum import ChildSumTreeLSTMClassifier
from foldexp.models.sequence import sentence_lstm
from foldexp.models.tree_lstm import TreeLSTMClassifier, random_tree, tree_lstm_classifier
from foldexp.models.weave import weave_network

Case = tuple[fb.Block, list[Any]]


def _rng() -> np.random.Generator:
    torch.manual_seed(0)
    return np.random.default_rng(0)


def inputs_and_layers() -> Case:
    """Scalar, Tensor, Vector, OneHot, OneHotFromList, InputTransform, Optional, FC, Record."""
    rng = _rng()
    block = (
        fb.Record(
            (
                fb.Scalar() >> fb.Function(lambda x: x.unsqueeze(1)),
                fb.Tensor([2, 2]) >> fb.Function(lambda t: t.flatten(1)),
                fb.Vector(3) >> fb.FC(2, activation=torch.tanh),
                fb.OneHot(4),
                fb.OneHotFromList(["a", "b", "c"]),
                fb.InputTransform(len) >> fb.Scalar() >> fb.Function(lambda x: x.unsqueeze(1)),
                fb.Optional(fb.Vector(2)),
            )
        )
        >> fb.Concat()
        >> fb.FC(3)
    )
    xs = [
        (float(k), rng.normal(size=(2, 2)).tolist(), rng.normal(size=3).tolist(), k % 4,
         "abc"[k % 3], "x" * k, None if k % 2 else [1.0, -1.0])
        for k in range(5)
    ]  # fmt: skip
    return block, xs


def composition_and_constants() -> Case:
    """Composition, FromTensor, AllOf, Identity, GetItem, Zeros, Void, Metric."""
    c = fb.Composition()
    with c.scope():
        x = (fb.Vector(3) >> fb.FC(3)).reads(c.input)
        ten = fb.FromTensor(10 * np.ones(3, dtype="float32"))
        both = fb.AllOf(fb.Identity(), fb.Function(torch.neg)).reads(x)
        fb.Metric("x").reads(x)
        fb.Void().reads(x)
        first = fb.GetItem(0).reads(both)
        c.output.reads(fb.Function(torch.mul).reads(ten, first), fb.Zeros(fb.TensorType(2)))
    return c, [[1.0, 2.0, 3.0], [0.0, -1.0, 0.5], [2.0, 2.0, 2.0]]


def sequences() -> Case:
    """Map, Fold, RNN, Reduce, Sum, Min, Max, Mean, Broadcast, Zip, ZipWith, NGrams, Nth,
    Length, Slice, on sequences of many lengths (the empty one too)."""
    rng = _rng()
    cell = fb.Concat() >> fb.FC(4, activation=torch.tanh)
    rnn_cell = (
        fb.Concat() >> fb.FC(4, activation=torch.tanh) >> fb.AllOf(fb.Identity(), fb.Identity())
    )
    seq = fb.Map(fb.Vector(2) >> fb.FC(4))
    block = (
        seq
        >> fb.AllOf(
            fb.Fold(cell, fb.Zeros(4)),
            fb.RNN(rnn_cell, fb.Zeros(4)) >> fb.GetItem(1),
            fb.Reduce(fb.Function(torch.add), fb.Zeros(4)),
            fb.Sum(),
            fb.Min(),
            fb.Max(),
            fb.Mean(),
            fb.AllOf(fb.Identity(), fb.Mean() >> fb.Broadcast())
            >> fb.ZipWith(fb.Function(torch.sub))
            >> fb.Sum(),
            fb.AllOf(fb.Identity(), fb.Identity())
            >> fb.Zip()
            >> fb.Map(fb.Function(torch.mul))
            >> fb.Sum(),
            fb.NGrams(2) >> fb.Map(fb.Concat() >> fb.FC(4)) >> fb.Sum(),
            fb.Slice(1, None, 2) >> fb.Sum(),
            fb.Length() >> fb.Function(lambda n: n.unsqueeze(1).expand(-1, 4)),
        )
        >> fb.Concat()
    )
    xs = [rng.normal(size=(n, 2)).tolist() for n in (0, 1, 2, 5, 3)]
    return block, xs


def nth_element() -> Case:
    """Nth of a sequence of learned vectors."""
    block = fb.Map(fb.Vector(2) >> fb.FC(3)) >> fb.Nth(1)
    return block, [[[1.0, 2.0], [3.0, 4.0]], [[0.0, 1.0], [1.0, 0.0], [2.0, 2.0]]]


def recursion_and_dispatch() -> Case:
    """ForwardDeclaration, OneOf, Embedding (an index tensor per leaf): a tree RNN."""
    rng = _rng()
    tree = fb.ForwardDeclaration()
    leaf = fb.GetItem(0) >> fb.Scalar("int64") >> fb.Function(fb.Embedding(20, 5))
    pair = fb.Record((tree(), tree())) >> fb.Concat() >> fb.FC(5, activation=torch.tanh)
    tree.resolve_to(fb.OneOf(len, [(1, leaf), (2, pair)]))

    def grow(n: int) -> tuple:
        if n == 1:
            return (int(rng.integers(20)),)
        k = int(rng.integers(1, n))
        return (grow(k), grow(n - k))

    return tree(), [grow(n) for n in (1, 2, 3, 7, 12)]


def loops() -> Case:
    """While (a data-dependent count, ``count=True``) and Unfold (a sequence until a stop)."""
    _rng()
    grow = fb.While(
        fb.Function(lambda x: x.sum(-1) < 100.0),
        fb.Function(torch.nn.Linear(3, 3)) >> fb.Function(lambda x: x.abs() + 1.0),
        max_iterations=4,
        count=True,
        name="grow",
    )

    def step(h: torch.Tensor, b: torch.Tensor) -> tuple:
        return (h * 0.5, b - 1.0), h.sum(-1), b <= 1.0

    unfold = fb.Unfold(fb.Function(step), max_length=6)
    block = fb.Record(
        (fb.Vector(3) >> grow, fb.Record([fb.Vector(3) >> fb.FC(3), fb.Scalar()]) >> unfold)
    ) >> fb.AllOf(fb.GetItem(0), fb.GetItem(1) >> fb.Sum())
    xs = [([0.0, 0.0, 0.0], ([0.1, 0.2, -0.3], 2.0)), ([200.0, 0.0, 0.0], ([1.0, 0.0, 0.5], 0.0))]
    xs.append(([1.0, 2.0, 3.0], ([0.5, 0.5, 0.5], 5.0)))
    return block, xs


def tree_lstm() -> Case:
    """The binary Tree-LSTM classifier's block (``models.tree_lstm``)."""
    rng = _rng()
    block = tree_lstm_classifier(vocab_size=30, embed_size=6, hidden_size=7, num_classes=3)
    return block, [random_tree(n, 30, rng) for n in (1, 2, 4, 9, 17)]


_WORDS = ["a", "good", "bad", "film", "not", "very", "+", "."]


def _tree(rng: np.random.Generator, depth: int) -> Tree:
    label = int(rng.integers(-1, 4))
    if depth == 0 or rng.random() < 0.3:
        return Tree(label, word=str(rng.choice(_WORDS)))
    return Tree(label, children=[_tree(rng, depth - 1) for _ in range(int(rng.integers(1, 4)))])


def sst_tree_lstm_model() -> Case:
    """``TreeLSTMClassifier``'s compiled block, as SST trains it (binary trees of words)."""
    rng = _rng()
    model = TreeLSTMClassifier(Vocabulary(_WORDS[:-1]), 4, embed_size=5, hidden_size=3).eval()

    def binary(depth: int) -> Tree:
        if depth == 0 or rng.random() < 0.3:
            return Tree(int(rng.integers(0, 4)), word=str(rng.choice(_WORDS)))
        return Tree(int(rng.integers(0, 4)), children=[binary(depth - 1), binary(depth - 1)])

    return model.compiler.root, [binary(3) for _ in range(5)]


def child_sum_model() -> Case:
    """``ChildSumTreeLSTMClassifier``'s compiled block (any number of children)."""
    rng = _rng()
    model = ChildSumTreeLSTMClassifier(Vocabulary(_WORDS[:-1]), 4, embed_size=5, hidden_size=3)
    return model.eval().compiler.root, [_tree(rng, 3) for _ in range(5)]


def sentence_lstm_model() -> Case:
    """``models.sequence.sentence_lstm``: an LSTM over a sentence's word vectors."""
    _rng()
    word = fb.Scalar("int64") >> fb.Function(fb.Embedding(12, 5))
    return sentence_lstm(word, 5, 6), [[1, 2, 3], [], [4], [5, 6, 7, 8, 9, 10, 11], [0, 0]]


def attention_model() -> Case:
    """``models.attention.attention_network``: the paper's feed-forward attention."""
    rng = _rng()
    seqs = [rng.random(size=(k, 2)).astype(np.float32) for k in (1, 5, 9, 2, 7)]
    return attention_network(2, 6, score="tanh"), seqs


def weave_model() -> Case:
    """``models.weave.weave_network``: the molecule graph convolution."""
    rng = _rng()

    def molecule(atoms: int) -> tuple:
        feats = rng.normal(size=(atoms, 4)).astype(np.float32)
        pairs = rng.normal(size=(atoms, atoms, 3)).astype(np.float32)
        return feats, (pairs + pairs.transpose(1, 0, 2)) / 2

    net = weave_network(4, 3, 2, layers=2, atom_size=5, pair_size=4, graph_size=6, mlp_size=5)
    return net, [molecule(k) for k in (1, 4, 2, 6, 3)]


# Cases whose control flow reads tensor values (a loop's condition), which a ``meta`` tensor has
# not: only a real device runs them.
NEEDS_VALUES = {"loops"}

CASES: dict[str, Callable[[], Case]] = {
    f.__name__: f
    for f in (
        inputs_and_layers,
        composition_and_constants,
        sequences,
        nth_element,
        recursion_and_dispatch,
        loops,
        tree_lstm,
        sst_tree_lstm_model,
        child_sum_model,
        sentence_lstm_model,
        attention_model,
        weave_model,
    )
}
