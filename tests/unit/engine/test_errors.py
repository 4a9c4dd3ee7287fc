"""Mistakes a user will make, each caught early with a message naming the block and the types."""

from __future__ import annotations

import pytest
import torch

import foldexp.blocks as fb
from foldexp import Compiler
from foldexp.types import TensorType


def test_pipe_type_mismatch_names_both_blocks_and_types() -> None:
    with pytest.raises(TypeError, match=r"Scalar\('float32'\).*Embedding.*expects a scalar int"):
        Compiler(fb.Scalar() >> fb.Function(fb.Embedding(5, 2)))


def test_fold_combine_must_take_a_pair() -> None:
    bad = fb.Map(fb.Scalar()) >> fb.Fold(fb.Function(torch.neg), fb.Zeros(()))
    with pytest.raises(TypeError, match=r"Fold.*combine block must take a pair"):
        Compiler(bad)


def test_fold_combine_must_keep_the_state_type() -> None:
    bad = fb.Map(fb.Vector(2)) >> fb.Fold(fb.Concat(), fb.Zeros(2))
    with pytest.raises(TypeError, match=r"combine block returns TensorType\(\(4,\)"):
        Compiler(bad)


def test_map_over_a_tensor_is_rejected() -> None:
    with pytest.raises(TypeError, match=r"Map\(.*expects a sequence as input, got TensorType"):
        Compiler(fb.Scalar() >> fb.Map(fb.Identity()))


def test_forward_declaration_resolved_twice() -> None:
    decl = fb.ForwardDeclaration(name="expr")
    decl.resolve_to(fb.Scalar())
    with pytest.raises(ValueError, match=r"ForwardDeclaration\('expr'\) is already resolved"):
        decl.resolve_to(fb.Scalar())


def test_forward_declaration_never_resolved() -> None:
    decl = fb.ForwardDeclaration(name="expr")
    with pytest.raises(TypeError, match=r"ForwardDeclaration\('expr'\) is used but was never"):
        Compiler(decl())


def test_recursive_declaration_without_a_base_case() -> None:
    decl = fb.ForwardDeclaration(name="loop")
    decl.resolve_to(fb.GetItem(0) >> decl())
    with pytest.raises(Exception, match=r"loop"):
        Compiler(decl())


def test_oneof_key_with_no_case_reports_path() -> None:
    block = fb.Map(fb.OneOf(lambda x: x[0], {"a": fb.GetItem(1) >> fb.Scalar()}))
    comp = Compiler(block >> fb.Reduce(fb.Function(torch.add)))
    with pytest.raises(
        fb.InputError, match=r"at input\[1\]\[2\] in OneOf.*key 'b' matches no case"
    ):
        comp([[("a", 1.0)], [("a", 1.0), ("a", 2.0), ("b", 3.0)]])


def test_scalar_given_a_string_reports_path() -> None:
    comp = Compiler(fb.Record({"x": fb.Scalar(), "y": fb.Scalar()}) >> fb.Function(torch.add))
    with pytest.raises(
        fb.InputError,
        match=r"at input\[0\]\['y'\] in Scalar.*expected a number, "
        r"got 'oops'",
    ):
        comp([{"x": 1.0, "y": "oops"}])


def test_tensor_shape_mismatch_in_input() -> None:
    comp = Compiler(fb.Vector(3) >> fb.FC(2))
    with pytest.raises(fb.InputError, match=r"expected shape \(3,\), got shape \(2,\)"):
        comp([[1.0, 2.0, 3.0], [1.0, 2.0]])


def test_zeros_shape_mismatch_in_oneof() -> None:
    block = fb.OneOf(lambda x: x is None, {True: fb.Zeros(3), False: fb.Vector(2)})
    with pytest.raises(
        TypeError, match=r"case False outputs TensorType\(\(2,\).*TensorType\(\(3,\)"
    ):
        Compiler(block)


def test_fc_built_for_one_size_rejects_another() -> None:
    fc = fb.FC(4)
    Compiler(fb.Vector(3) >> fb.Function(fc))
    with pytest.raises(TypeError, match=r"built for inputs of size 3"):
        Compiler(fb.Vector(5) >> fb.Function(fc))


def test_compiled_root_must_output_tensors() -> None:
    with pytest.raises(TypeError, match=r"must output a tensor"):
        Compiler(fb.Map(fb.Scalar()))


def test_function_failing_on_test_batch_is_named() -> None:
    def bad(x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("boom")

    with pytest.raises(TypeError, match=r"Function\(bad\) failed on a test batch.*boom"):
        Compiler(fb.Scalar() >> fb.Function(bad))


def test_block_used_with_two_input_types() -> None:
    fn = fb.Function(lambda x: x * 2)
    Compiler(fb.Scalar() >> fn)
    with pytest.raises(
        TypeError,
        match=r"Vector\(2, 'float32'\) outputs TensorType\(\(2,\).*"
        r"Function\(<lambda>\) expects TensorType\(\(\)",
    ):
        Compiler(fb.Vector(2) >> fn)


def test_types_are_structural_and_immutable() -> None:
    assert TensorType(3) == TensorType((3,), "float32")
    assert hash(TensorType(3)) == hash(TensorType([3]))
    with pytest.raises(AttributeError):
        TensorType(3).shape = (4,)  # type: ignore[misc]
    with pytest.raises(TypeError, match="unknown dtype"):
        TensorType(3, "float7")
