"""``ForwardDeclaration`` and ``OneOf``: types inferred through recursion, in any position."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import foldexp.blocks as fb
from foldexp import Compiler
from foldexp.models.cells import TreeLSTMCell
from foldexp.testing import check_block
from foldexp.types import PyObjectType, TensorType, TupleType


def _tree(n: int, rng: np.random.Generator) -> tuple:
    if n == 1:
        return (int(rng.integers(8)),)
    k = int(rng.integers(1, n))
    return (_tree(k, rng), _tree(n - k, rng))


def test_types_inferred_on_resolution_when_the_cell_follows_the_oneof(
    rng: np.random.Generator,
) -> None:
    """The paper's shape ``OneOf(...) >> TreeLSTM``: the type comes from after the dispatch."""
    n = 3
    state = (TensorType(n), TensorType(n))
    expr = fb.ForwardDeclaration()
    word = fb.AllOf(fb.GetItem(0) >> fb.OneHot(8), fb.Zeros((state, state)))
    pair = fb.AllOf(fb.Zeros(8), fb.Record((expr(), expr())))
    expr.resolve_to(fb.OneOf(len, [(1, word), (2, pair)]) >> fb.Function(TreeLSTMCell(n)))
    assert expr.input_type is None and expr.output_type is None
    trees = [_tree(k, rng) for k in [1, 2, 3, 6, 11]]
    root = expr() >> fb.GetItem(0)
    Compiler(root)
    assert root.input_type == PyObjectType()  # typed for good: nothing provisional is left
    assert root.output_type == TensorType(n)
    check_block(root, trees)
    assert expr.input_type == PyObjectType()
    assert expr.output_type == TupleType(TensorType(n), TensorType(n))


def test_declared_types_are_checked(rng: np.random.Generator) -> None:
    decl = fb.ForwardDeclaration(PyObjectType(), TensorType(2), name="t")
    leaf = fb.GetItem(0) >> fb.OneHot(2)
    decl.resolve_to(
        fb.OneOf(len, {1: leaf, 2: fb.Record((decl(), decl())) >> fb.Function(torch.add)})
    )
    check_block(decl(), [((0,), ((1,), (1,)))], expected=[[1, 2]])
    wrong = fb.ForwardDeclaration(output_type=TensorType(3), name="w")
    wrong.resolve_to(fb.OneHot(2))
    with pytest.raises(TypeError, match=r"ForwardDeclaration\('w'\) declares output TensorType"):
        Compiler(wrong())


def test_recursive_case_of_the_wrong_type_is_named() -> None:
    decl = fb.ForwardDeclaration(name="t")
    leaf = fb.GetItem(0) >> fb.OneHot(2)
    pair = fb.Record((decl(), decl())) >> fb.Concat()  # (2,) + (2,) → (4,): not a (2,)
    decl.resolve_to(fb.OneOf(len, {1: leaf, 2: pair}))
    with pytest.raises(TypeError, match=r"case 2 outputs TensorType\(\(4,\).*must agree"):
        Compiler(decl())


def test_mutual_recursion_through_two_declarations(rng: np.random.Generator) -> None:
    # even/odd levels of a tree use different layers
    even, odd = fb.ForwardDeclaration(name="even"), fb.ForwardDeclaration(name="odd")
    leaf = fb.GetItem(0) >> fb.OneHot(8)

    def level(child: fb.ForwardDeclaration) -> fb.Block:
        pair = fb.Record((child(), child())) >> fb.Concat() >> fb.FC(8)
        return fb.OneOf(len, [(1, leaf), (2, pair)])

    even.resolve_to(level(odd))
    odd.resolve_to(level(even))
    root = even() >> fb.FC(2)
    Compiler(root)
    assert root.output_type == TensorType(2) and odd.output_type == TensorType(8)
    check_block(root, [_tree(k, rng) for k in [1, 2, 5, 9]])


def test_resolution_errors() -> None:
    decl = fb.ForwardDeclaration(name="x")
    with pytest.raises(TypeError, match=r"ForwardDeclaration\('x'\) is used but was never"):
        Compiler(fb.Map(decl()) >> fb.Sum())
    decl.resolve_to(fb.Scalar())
    with pytest.raises(ValueError, match=r"ForwardDeclaration\('x'\) is already resolved"):
        decl.resolve_to(fb.Scalar())
    loop = fb.ForwardDeclaration(name="loop")
    loop.resolve_to(fb.OneOf(len, {1: loop(), 2: loop()}))
    with pytest.raises(TypeError, match=r"ForwardDeclaration\('loop'\): its type cannot be"):
        Compiler(loop())


def test_oneof_with_pre_block_and_no_case() -> None:
    block = fb.OneOf(
        lambda x: x[0],
        {"neg": fb.Function(torch.neg), "id": fb.Identity()},
        pre_block=fb.GetItem(1) >> fb.Scalar(),
    )
    check_block(block, [("neg", 2.0), ("id", 3.0)], expected=[-2.0, 3.0])
    with pytest.raises(fb.InputError, match=r"at input\[0\] in OneOf.*key 'x' matches no case"):
        Compiler(block)([("x", 1.0)])
