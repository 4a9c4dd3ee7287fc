"""The mistakes a user will make, each naming the block and what it expected (issue 3's list;
the engine's ``tests/unit/engine/test_errors.py`` covers the first cases of several)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import foldexp.blocks as fb
from foldexp import Compiler
from foldexp.models.paper import pipeline


def test_pipe_type_mismatch_at_composition_and_at_compile_time() -> None:
    with pytest.raises(TypeError, match=r"cannot compose Scalar\('float32'\) >> Vector\(2"):
        fb.Scalar() >> fb.Vector(2)  # known at once: a tensor into a Python-object input
    late = fb.Map(fb.Scalar()) >> fb.FC(3)
    with pytest.raises(
        TypeError,
        match=r"cannot compose Map\(Scalar\('float32'\)\) >> Function\(FC\).*SequenceType",
    ):
        Compiler(late)


def test_fold_and_reduce_combiners_must_take_pairs() -> None:
    with pytest.raises(TypeError, match=r"Fold\(.*combine block must take a pair \(state"):
        Compiler(fb.Map(fb.Vector(2)) >> fb.Fold(fb.Function(torch.tanh), fb.Zeros(2)))
    with pytest.raises(TypeError, match=r"Reduce\(.*combine block must take a pair of"):
        Compiler(fb.Map(fb.Vector(2)) >> fb.Reduce(fb.Function(torch.tanh)))
    with pytest.raises(TypeError, match=r"Sum\(\) expects a pair of equal|Sum\(\) expects a seq"):
        Compiler(fb.Map(fb.InputTransform(str)) >> fb.Sum())


def test_map_over_a_non_sequence() -> None:
    with pytest.raises(
        TypeError, match=r"Map\(Identity\(\)\) expects a sequence as input, got Tup"
    ):
        Compiler(fb.AllOf(fb.Scalar(), fb.Vector(2)) >> fb.Map(fb.Identity()))
    comp = Compiler(fb.Map(fb.Scalar()) >> fb.Sum())
    with pytest.raises(fb.InputError, match=r"at input\[1\] in Map\(Scalar\('float32'\)\): expec"):
        comp([[1.0], 7])


def test_zeros_and_fc_shape_mismatches() -> None:
    rnn_cell = fb.Concat() >> fb.FC(5, activation=torch.relu)
    with pytest.raises(TypeError, match=r"combine block returns TensorType\(\(5,\).*state is Ten"):
        Compiler(fb.Map(fb.Vector(3)) >> fb.Fold(rnn_cell, fb.Zeros(4)))
    with pytest.raises(TypeError, match=r"Function\(FC\) expects a float vector or a tuple"):
        Compiler(fb.Tensor([2, 2]) >> fb.FC(3))
    fc = fb.FC(2)
    Compiler(fb.Vector(3) >> fb.Function(fc))
    with pytest.raises(TypeError, match=r"Function\(FC\) was built for inputs of size 3"):
        Compiler(fb.Vector(4) >> fb.Function(fc))


def test_composition_cycle_and_unread_output_are_reported() -> None:
    c = fb.Composition(name="c")
    with c.scope():
        a = fb.Identity()
        b = fb.Identity().reads(a)
        with pytest.raises(ValueError, match=r"wiring Identity\(\) to read .* makes a cycle"):
            c.connect(b, a)
        a.reads(c.input)
        dangling = fb.Scalar().reads(b)
        c.output.reads(a)
    with pytest.raises(TypeError, match=r"output of Scalar\('float32'\) .* is never read"):
        Compiler(c)
    assert dangling.input_type is not None  # it was typed before the unread output was found


def test_python_input_of_the_wrong_kind_reports_its_path() -> None:
    words = {"a": 1, "b": 2}
    ns = pipeline(words, np.zeros((3, 2), dtype=np.float32), d=3, n=2)
    comp = Compiler(ns.loss)
    with pytest.raises(
        fb.InputError, match=r"at input\[1\]\['label'\] in Scalar\('int64'\): expected an integer"
    ):
        comp([{"text": "a b", "label": 1}, {"text": "b", "label": "one"}])
    with pytest.raises(fb.InputError, match=r"at input\[0\]\['text'\] in InputTransform"):
        comp([{"text": 3, "label": 1}])
    with pytest.raises(fb.InputError, match=r"at input\[0\] in Record.*no field 'label'"):
        comp([{"text": "a"}])
