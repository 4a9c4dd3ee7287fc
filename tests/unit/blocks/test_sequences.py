"""Sequence blocks through the oracle: reductions, broadcast and zips, n-grams, indexing, RNN."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from torch import nn

import foldexp.blocks as fb
from foldexp import Compiler
from foldexp.testing import check_block
from foldexp.types import BroadcastSequenceType, SequenceType, TensorType, TupleType

LENGTHS = [0, 1, 2, 3, 5, 8]


def _vectors(rng: np.random.Generator, n: int, size: int = 3) -> list[list[float]]:
    return rng.normal(size=(n, size)).round(3).tolist()


def _learned(size: int = 3) -> fb.Block:
    """A vector input through a trained layer, so gradients have something to reach."""
    return fb.Vector(size) >> fb.FC(size, activation=torch.tanh)


@pytest.mark.parametrize(
    ("block", "reduce"),
    [
        (fb.Sum, lambda a: a.sum(0)),
        (fb.Min, lambda a: a.min(0)),
        (fb.Max, lambda a: a.max(0)),
        (fb.Mean, lambda a: a.mean(0)),
    ],
)
def test_reductions_values_depths_and_zeros_when_empty(
    block: type, reduce: object, rng: np.random.Generator
) -> None:
    xs = [_vectors(rng, n) for n in LENGTHS]
    want = [reduce(np.asarray(x)) if x else np.zeros(3) for x in xs]  # type: ignore[operator]
    extra = 1 if block is fb.Mean else 0  # the division by the length
    depths = [(math.ceil(math.log2(n)) if n else 0) + extra for n in LENGTHS]
    check_block(fb.Map(fb.Vector(3)) >> block(), xs, expected=want, expected_depth=depths)
    check_block(fb.Map(_learned()) >> block(), xs)  # values and gradients


def test_sum_of_pairs_and_of_a_tuple(rng: np.random.Generator) -> None:
    pairs = fb.Map((fb.Scalar(), fb.Vector(2))) >> fb.Sum()
    xs = [[(1.0, [1, 2]), (2.0, [3, 4]), (4.0, [0, 1])], []]
    check_block(pairs, xs, expected=[(7.0, [4, 7]), (0.0, [0, 0])])
    # A homogeneous tuple is a sequence too (the weave module sums pairs this way).
    check_block(fb.AllOf(_learned(), _learned()) >> fb.Sum(), _vectors(rng, 4))


def test_reductions_share_one_op_per_type() -> None:
    a, b = fb.Map(fb.Scalar()) >> fb.Sum(), fb.Map(fb.Scalar()) >> fb.Sum()
    comp = check_block(fb.AllOf(a, b), [[1.0, 2.0], [3.0]], expected=[(3.0, 3.0), (3.0, 3.0)])
    assert len(comp.ops) == 1
    plan = comp.build([[1.0, 2.0], [3.0]])
    assert plan.num_calls == 1  # both sums of the batch, at depth 1, in one call


def test_mean_needs_float_tensors() -> None:
    with pytest.raises(TypeError, match=r"Mean\(\) expects a sequence of float tensors"):
        Compiler(fb.Map(fb.Scalar("int64")) >> fb.Mean())


def test_broadcast_zip_with_finite_sequences(rng: np.random.Generator) -> None:
    # Centre each sequence: x_i - mean(x), the broadcast taking each sequence's length.
    centre = fb.Map(_learned()) >> fb.AllOf(fb.Identity(), fb.Mean() >> fb.Broadcast())
    block = centre >> fb.ZipWith(fb.Function(torch.sub)) >> fb.Sum()
    xs = [_vectors(rng, n) for n in LENGTHS]
    check_block(block, xs)
    plain = fb.Map(fb.Vector(3)) >> fb.AllOf(fb.Identity(), fb.Mean() >> fb.Broadcast())
    plain = plain >> fb.ZipWith(fb.Function(torch.sub)) >> fb.Sum()
    check_block(plain, xs, expected=[np.zeros(3)] * len(xs), atol=1e-5)


def test_broadcast_types_and_eager_value() -> None:
    b = fb.Scalar() >> fb.Broadcast()
    assert b.eval(2.0) is not None
    assert b.output_type == BroadcastSequenceType(TensorType(()))
    first = list(itertools.islice(b.eval(2.0), 3))
    assert [float(v) for v in first] == [2.0, 2.0, 2.0]
    both = fb.AllOf(fb.Scalar() >> fb.Broadcast(), fb.Vector(2) >> fb.Broadcast()) >> fb.Zip()
    both.infer(fb.PyObjectType())
    assert both.output_type == BroadcastSequenceType(TupleType(TensorType(()), TensorType(2)))
    # Map over a broadcast sequence runs its block once; the result is still endless.
    mapped = fb.Scalar() >> fb.Broadcast() >> fb.Map(fb.Function(torch.neg))
    assert mapped.max_depth(1.0) == 1
    # All-broadcast zips stay endless until a finite sequence fixes the length.
    block = (
        fb.AllOf(
            fb.GetItem(0) >> fb.Map(fb.Scalar()),
            fb.AllOf(
                fb.GetItem(1) >> fb.Scalar() >> fb.Broadcast(),
                fb.GetItem(1) >> fb.Scalar() >> fb.Broadcast(),
            )
            >> fb.Zip(),
        )
        >> fb.ZipWith(fb.Function(lambda x, yz: x * yz[0] + yz[1]))
        >> fb.Sum()
    )
    check_block(block, [([1.0, 2.0, 3.0], 2.0), ([], 5.0)], expected=[18.0, 0.0])


def test_zip_stops_at_the_shortest_and_zips_python_objects() -> None:
    block = fb.Record((fb.Map(fb.Scalar()), fb.Map(fb.Scalar()))) >> fb.ZipWith(
        fb.Function(torch.mul)
    )
    block = block >> fb.Sum()
    check_block(block, [([1.0, 2.0, 3.0], [4.0, 5.0]), ([], [1.0])], expected=[14.0, 0.0])
    raw = fb.Zip() >> fb.Map(fb.Record((fb.Scalar(), fb.Scalar())) >> fb.Function(torch.sub))
    check_block(raw >> fb.Sum(), [([3.0, 4.0], [1.0, 1.0])], expected=[5.0])


def test_zip_of_sequences_of_sequences(rng: np.random.Generator) -> None:
    # Tuples of sequences of sequences: zip the outer level, then the inner one.
    inner = fb.ZipWith(fb.Concat() >> fb.FC(2)) >> fb.Sum()
    block = fb.Record((fb.Map(fb.Map(fb.Vector(3))), fb.Map(fb.Map(fb.Vector(3)))))
    block = block >> fb.ZipWith(inner) >> fb.Max()
    xs = []
    for n in [0, 1, 3, 2]:
        lens = rng.integers(0, 4, size=n)
        xs.append(([_vectors(rng, k) for k in lens], [_vectors(rng, k) for k in lens]))
    check_block(block, xs)
    assert block.blocks[0].output_type == TupleType(
        SequenceType(SequenceType(TensorType(3))), SequenceType(SequenceType(TensorType(3)))
    )


def test_ngrams(rng: np.random.Generator) -> None:
    block = fb.Map(fb.Scalar()) >> fb.NGrams(2) >> fb.Map(fb.Function(torch.mul)) >> fb.Sum()
    check_block(block, [[1.0, 2.0, 3.0], [5.0], []], expected=[8.0, 0.0, 0.0])
    tri = fb.Map(_learned()) >> fb.NGrams(3) >> fb.Map(fb.Concat() >> fb.FC(2)) >> fb.Mean()
    check_block(tri, [_vectors(rng, n) for n in LENGTHS])
    assert (fb.Map(fb.Scalar()) >> fb.NGrams(2)).eval([1.0, 2.0, 3.0])[1][0] == 2.0
    with pytest.raises(ValueError, match="positive"):
        fb.NGrams(0)


def test_nth_getitem_slice_and_length() -> None:
    seq = fb.Map(fb.Scalar())
    check_block(seq >> fb.Nth(1), [[1.0, 2.0], [3.0, 4.0, 5.0]], expected=[2.0, 4.0])
    check_block(seq >> fb.Nth(-1), [[1.0, 2.0], [3.0]], expected=[2.0, 3.0])
    pair = fb.Record((seq, fb.Identity())) >> fb.Nth()
    check_block(pair, [([1.0, 2.0, 3.0], 2), ([7.0], 0)], expected=[3.0, 7.0])
    check_block(seq >> fb.GetItem(0), [[6.0]], expected=[6.0])
    rev = seq >> fb.Slice(step=-1) >> fb.NGrams(2) >> fb.Map(fb.Function(torch.sub)) >> fb.Sum()
    check_block(rev, [[1.0, 2.0, 4.0]], expected=[3.0])  # (4 - 2) + (2 - 1)
    check_block(fb.Slice(1, 3) >> seq >> fb.Sum(), [[1.0, 2.0, 4.0, 8.0]], expected=[6.0])
    head = seq >> fb.Slice(stop=2)
    assert head.infer(fb.PyObjectType()) == SequenceType(TensorType(()))
    assert head.output_type == SequenceType(TensorType(()))
    check_block(
        fb.AllOf(seq >> fb.Length(), fb.Length("int64"), fb.AllOf(seq, seq) >> fb.Length()),
        [[1.0, 2.0, 3.0], []],
        expected=[(3.0, 3, 2.0), (0.0, 0, 2.0)],
        expected_depth=0,
    )
    tup = fb.AllOf(fb.Scalar(), fb.Scalar(), fb.Scalar()) >> fb.Slice(start=1)
    assert tup.output_type is None
    tup.infer(fb.PyObjectType())
    assert tup.output_type == TupleType(TensorType(()), TensorType(()))


def test_mean_of_lengths_is_a_learned_average(rng: np.random.Generator) -> None:
    # Mean == Sum / Length, written with the general blocks.
    block = fb.Map(_learned()) >> fb.AllOf(fb.Mean(), fb.AllOf(fb.Sum(), fb.Length()))
    block = block >> fb.Function(lambda m, sl: m - sl[0] / sl[1].clamp(min=1).unsqueeze(1))
    xs = [_vectors(rng, n) for n in LENGTHS]
    check_block(block, xs, expected=[np.zeros(3)] * len(xs))


class _Elman(nn.Module):
    """``(x, h) → (y, h')`` as an ``RNN`` cell: a tanh layer; the output is the new state."""

    def __init__(self, n_in: int, n: int) -> None:
        super().__init__()
        self.lin = nn.Linear(n_in + n, n)

    def forward(self, x: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.tanh(self.lin(torch.cat([x, h], dim=1)))
        return h, h


def test_rnn_outputs_and_final_state(rng: np.random.Generator) -> None:
    xs = [_vectors(rng, n) for n in LENGTHS]
    cell = fb.Function(_Elman(3, 4), output_type=TupleType(TensorType(4), TensorType(4)))
    rnn = fb.Map(fb.Vector(3)) >> fb.RNN(cell)
    out_and_state = rnn >> fb.Record((fb.Sum(), fb.Identity()))
    check_block(out_and_state, xs)
    check_block(rnn >> fb.GetItem(1), xs, expected_depth=LENGTHS)
    for x in xs:  # the last output is the final state
        outs, state = rnn.eval(x)
        assert len(outs) == len(x)
        if outs:
            assert torch.equal(outs[-1], state)
    given = fb.Map(fb.Vector(3)) >> fb.RNN(fb.Function(_Elman(3, 4)), initial_state=4)
    check_block(given >> fb.GetItem(1), xs)
    from_input = fb.Record((fb.Map(fb.Vector(3)), fb.Vector(4))) >> fb.RNN(
        fb.Function(_Elman(3, 4)), initial_state_from_input=True
    )
    check_block(from_input >> fb.GetItem(1), [(x, [0.5, 0, 0, -1]) for x in xs])


def test_rnn_errors() -> None:
    with pytest.raises(TypeError, match=r"cannot tell the state type"):
        Compiler(fb.Map(fb.Vector(3)) >> fb.RNN(fb.Function(_Elman(3, 4))))
    with pytest.raises(TypeError, match=r"must return a pair \(output, state"):
        Compiler(fb.Map(fb.Vector(4)) >> fb.RNN(fb.Function(torch.add), initial_state=4))
    with pytest.raises(ValueError, match="initial_state"):
        fb.RNN(fb.Identity(), initial_state=3, initial_state_from_input=True)


def test_endless_sequences_cannot_be_reduced_or_measured() -> None:
    endless = fb.Scalar() >> fb.Broadcast()
    for block in [fb.Sum(), fb.Fold(fb.Function(torch.add), fb.Zeros(())), fb.Length(), fb.Nth(0)]:
        with pytest.raises(TypeError, match=r"endless broadcast|finite sequence"):
            Compiler(endless >> block)


def test_sequence_input_errors_report_the_path() -> None:
    comp = Compiler(fb.Map(fb.Map(fb.Scalar()) >> fb.Sum()) >> fb.Sum())
    with pytest.raises(fb.InputError, match=r"at input\[1\]\[0\]\[2\] in Scalar"):
        comp([[[1.0]], [[1.0, 2.0, "x"]]])
    with pytest.raises(fb.InputError, match=r"at input\[0\] in Map.*expected a sequence"):
        comp([3.0])
    nth = Compiler(fb.Map(fb.Scalar()) >> fb.Nth(5))
    with pytest.raises(fb.InputError, match=r"at input\[0\] in Nth\(5\).*cannot take element 5"):
        nth([[1.0]])
