"""Inputs (one-hot, embeddings from a matrix), records from plain containers, zeros of any
type, constants, and the typed surface every block shares (types, depth, repr)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import foldexp.blocks as fb
from foldexp import Compiler
from foldexp.testing import check_block
from foldexp.types import PyObjectType, SequenceType, TensorType, TupleType, VoidType


def test_one_hot_ranges_and_dtype() -> None:
    check_block(fb.OneHot(3), [0, 2, 1], expected=[[1, 0, 0], [0, 0, 1], [0, 1, 0]])
    check_block(fb.OneHot(2, 5), [2, 4], expected=[[1, 0, 0], [0, 0, 1]], expected_depth=0)
    as_int = fb.OneHot(1, 3, dtype="int64")
    assert as_int.output_type == TensorType(2, "int64")
    check_block(as_int, [1, 2], expected=[[1, 0], [0, 1]])
    learned = fb.Map(fb.OneHot(4) >> fb.FC(3)) >> fb.Sum()
    check_block(learned, [[0, 3, 3], [], [1]])
    assert repr(fb.OneHot(3)) == "OneHot(3)"
    assert repr(fb.OneHot(2, 5, dtype="int64")) == "OneHot(2, 5, dtype='int64')"
    with pytest.raises(ValueError, match=r"range \[3, 3\) is empty"):
        fb.OneHot(3, 3)
    comp = Compiler(fb.Map(fb.OneHot(3)) >> fb.Sum())
    with pytest.raises(fb.InputError, match=r"at input\[0\]\[1\] in OneHot\(3\): 3 is outside"):
        comp([[0, 3]])
    with pytest.raises(fb.InputError, match=r"expected an integer, got 'a'"):
        comp([["a"]])


def test_one_hot_from_list() -> None:
    colours = fb.OneHotFromList(["red", "green", "blue"])
    check_block(colours, ["blue", "red"], expected=[[0, 0, 1], [1, 0, 0]])
    lenient = fb.OneHotFromList(["a", ("b", 1)], strict=False)
    check_block(lenient, ["a", ("b", 1), "zzz", [1]], expected=[[1, 0], [0, 1], [0, 0], [0, 0]])
    assert repr(lenient) == "OneHotFromList(['a', ('b', 1)], strict=False)"
    with pytest.raises(fb.InputError, match=r"'pink' is not one of \['red', 'green', 'blue'\]"):
        Compiler(colours)(["pink"])
    with pytest.raises(ValueError, match="distinct"):
        fb.OneHotFromList(["a", "a"])


def test_embedding_from_a_matrix_frozen_or_trainable() -> None:
    matrix = np.arange(12, dtype=np.float32).reshape(6, 2)
    frozen = fb.Embedding(initializer=matrix, trainable=False)
    assert (frozen.num_buckets, frozen.num_units_out) == (6, 2)
    assert not frozen.weight.requires_grad
    block = fb.Map(fb.Scalar("int64") >> fb.Function(frozen) >> fb.FC(2)) >> fb.Sum()
    comp = check_block(block, [[1, 5], [], [0]])
    assert all(p is not frozen.weight for p in comp.parameters() if p.requires_grad)
    trainable = fb.Embedding(initializer=matrix)
    block = fb.Map(fb.Scalar("int64") >> fb.Function(trainable)) >> fb.Sum()
    comp = check_block(block, [[1, 5], [], [0, 0]], expected=[[12, 14], [0, 0], [0, 2]])
    comp([[1, 1]]).sum().backward()
    assert trainable.weight.grad[1].tolist() == [2.0, 2.0]
    with pytest.raises(ValueError, match="needs num_buckets"):
        fb.Embedding(5)


def test_records_from_plain_containers() -> None:
    as_dict = {"a": fb.Scalar(), "b": fb.Vector(2)} >> fb.Concat(flatten=True)
    check_block(as_dict, [{"a": 1.0, "b": [2.0, 3.0]}], expected=[[1, 2, 3]])
    as_tuple = (fb.Scalar(), fb.Scalar()) >> fb.Function(torch.sub)
    check_block(as_tuple, [(5.0, 2.0), [1.0, 1.0]], expected=[3.0, 0.0])
    as_list = fb.Map([fb.Scalar(), fb.Scalar()] >> fb.Function(torch.mul)) >> fb.Sum()
    check_block(as_list, [[(2.0, 3.0), (1.0, 1.0)]], expected=[7.0])
    pairs = fb.Record([("x", fb.Scalar()), ("y", fb.Scalar())]) >> fb.Function(torch.add)
    check_block(pairs, [{"y": 1.0, "x": 2.0}], expected=[3.0])


def test_zeros_of_tuple_and_sequence_types() -> None:
    state = (TensorType(2), TensorType(2))
    z = fb.Zeros((state, state))
    assert z.output_type == TupleType(TupleType(TensorType(2), TensorType(2)), TupleType(*state))
    check_block(z, [None, 1], expected=[(([0, 0], [0, 0]), ([0, 0], [0, 0]))] * 2)
    assert fb.Zeros("int64").output_type == TensorType((), "int64")
    assert fb.Zeros([2, 3, "int64"]).output_type == TensorType((2, 3), "int64")
    assert fb.Zeros(SequenceType(TensorType(2))).eval(None) == []
    assert fb.Zeros(VoidType()).eval(None) is None
    with pytest.raises(TypeError, match="Zeros cannot make a value of type PyObjectType"):
        fb.Zeros(PyObjectType())


def test_from_tensor_identity_void() -> None:
    block = fb.AllOf(fb.FromTensor(torch.tensor([1.0, 2.0])), fb.Vector(2)) >> fb.Function(
        torch.mul
    )
    check_block(block, [[3.0, 4.0]], expected=[[3.0, 8.0]])
    check_block(fb.Scalar() >> fb.Identity(), [1.0], expected=[1.0])
    assert (fb.Scalar() >> fb.Void()).eval(1.0) is None


def test_types_depth_and_repr() -> None:
    block = fb.Map(fb.Vector(3) >> fb.FC(2)) >> fb.Sum()
    assert block.input_type is None
    Compiler(block)
    assert block.input_type == PyObjectType()
    assert block.output_type == TensorType(2)
    assert block.blocks[0].output_type == SequenceType(TensorType(2))
    assert block.max_depth([[1, 2, 3]] * 5) == 1 + 3  # FC, then ⌈log2 5⌉ sums
    reprs = {
        fb.ZipWith(fb.Function(torch.mul)): "ZipWith(Function(mul))",
        fb.Slice(1, None, -1): "Slice(start=1, step=-1)",
        fb.NGrams(2): "NGrams(2)",
        fb.Nth(): "Nth()",
        fb.Length("int64"): "Length('int64')",
        fb.Broadcast(): "Broadcast()",
        fb.Max(): "Max()",
        fb.RNN(fb.Identity()): "RNN(Identity())",
        fb.RNN(
            fb.Identity(), initial_state=3
        ): "RNN(Identity(), initial_state=Zeros(TensorType((3,), 'float32')))",
        fb.Metric("loss"): "Metric('loss')",
        fb.OneHotFromList("ab"): "OneHotFromList(['a', 'b'])",
        fb.Sum() >> fb.Broadcast(): "Sum() >> Broadcast()",
    }
    for b, want in reprs.items():
        assert repr(b) == want
    with pytest.raises(TypeError, match="not iterable"):
        list(fb.Identity())


def test_every_public_name_is_exported_and_documented() -> None:
    doc = fb.__doc__ or ""
    for name in fb.__all__:
        obj = getattr(fb, name)
        assert obj.__doc__, f"{name} has no docstring"
        if name not in {"Block", "InputError", "Wire", "convert_to_block", "Op"}:
            assert f"``{name}" in doc, f"{name} is not listed in foldexp.blocks' docstring"
