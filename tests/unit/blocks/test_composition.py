"""``Composition``: DAG wiring, typing in topological order, and every wiring mistake."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import foldexp.blocks as fb
from foldexp import Compiler
from foldexp.testing import check_block
from foldexp.types import TensorType, TupleType


def test_tf_fold_doc_example_x_squared_plus_ten_x() -> None:
    c = fb.Composition()
    with c.scope():
        x = fb.Vector(3).reads(c.input)
        x_squared = fb.Function(torch.mul).reads(x, x)
        ten = fb.FromTensor(10 * np.ones(3, dtype="float32"))
        ten_x = fb.Function(torch.mul).reads(ten, x)
        c.output.reads(fb.Function(torch.add).reads(x_squared, ten_x))
    xs = [[1.0, 2.0, 3.0], [0.0, -1.0, 0.5]]
    check_block(c, xs, expected=[[v * v + 10 * v for v in x] for x in xs], expected_depth=2)
    assert c.input_type == fb.PyObjectType() and c.output_type == TensorType(3)


def test_diamond_with_a_learned_layer_and_tuple_output(rng: np.random.Generator) -> None:
    c = fb.Composition(name="diamond")
    with c.scope():
        h = (fb.Vector(4) >> fb.FC(4)).reads(c.input)
        left = fb.Function(fb.FC(2, activation=torch.tanh)).reads(h)
        right = fb.Function(fb.FC(3)).reads(h)
        c.output.reads(left, right, fb.Concat().reads(left, right))
    check_block(c, rng.normal(size=(5, 4)).tolist())
    assert c.output_type == TupleType(TensorType(2), TensorType(3), TensorType(5))
    assert repr(c) == "Composition(name='diamond')"
    assert repr(c.input) == "Composition(name='diamond').input"


def test_input_items_and_block_items(rng: np.random.Generator) -> None:
    c = fb.Composition()
    with c.scope():
        pair = fb.Record({"a": fb.Vector(2), "b": fb.Scalar()}).reads(c.input)
        scaled = fb.Function(lambda v, s: v * s.unsqueeze(1)).reads(pair["a"], pair[1])
        label = fb.Scalar("int64").reads(c.input["y"])
        c.output.reads(fb.Function(fb.FC(2)).reads(scaled), label)
    xs = [{"a": [1.0, 2.0], "b": 3.0, "y": 1}, {"a": [0.5, 0.5], "b": -1.0, "y": 0}]
    check_block(c, xs)
    assert c.eval(xs[0])[1] == 1


def test_tuple_input_wires_and_nested_compositions(rng: np.random.Generator) -> None:
    inner = fb.Composition()
    with inner.scope():
        s = fb.Function(torch.add).reads(inner.input[0], inner.input[1])
        inner.output.reads(fb.Function(fb.FC(3)).reads(s))
    outer = fb.Composition()
    with outer.scope():
        a = fb.Vector(3).reads(outer.input[0])
        b = fb.Vector(3).reads(outer.input[1])
        both = fb.AllOf(inner, inner).reads(a, b)  # one block twice: shared weights
        outer.output.reads(fb.Function(torch.sub).reads(both[0], both[1]))
    xs = [(rng.normal(size=3).tolist(), rng.normal(size=3).tolist()) for _ in range(3)]
    check_block(outer, xs, expected=[np.zeros(3)] * 3)


def test_void_output_with_metrics_only(check_metrics: object) -> None:
    c = fb.Composition()
    with c.scope():
        v = (fb.Map(fb.Scalar()) >> fb.Sum()).reads(c.input)
        fb.Metric("total").reads(v)
        c.output.reads()
    assert c.infer(fb.PyObjectType()) == fb.VoidType()
    check_metrics(c, [[1.0, 2.0], [], [5.0]], ["total"])  # type: ignore[operator]


def test_sinks_with_void_output_need_not_be_read() -> None:
    c = fb.Composition()
    with c.scope():
        x = fb.Scalar().reads(c.input)
        fb.Void().reads(x)
        c.output.reads(x)
    check_block(c, [1.0, 2.0], expected=[1.0, 2.0])


def test_reads_returns_self_and_pipes_compose() -> None:
    c = fb.Composition()
    with c.scope():
        block = fb.Scalar() >> fb.Function(torch.neg)
        assert block.reads(c.input) is block
        c.output.reads(block)
    check_block(c >> fb.Function(torch.exp), [0.0, 1.0], expected=[1.0, np.exp(-1.0)])


# ---- mistakes ----------------------------------------------------------------------------------
def test_cycle_is_caught_when_wired() -> None:
    c = fb.Composition(name="loop")
    with c.scope():
        a = fb.Function(torch.neg)
        b = fb.Function(torch.exp).reads(a)
        with pytest.raises(
            ValueError, match=r"Composition\(name='loop'\): wiring .* makes a cycle"
        ):
            a.reads(b)
        d = fb.Identity()
        with pytest.raises(ValueError, match=r"makes a cycle \(Identity\(\) -> Identity\(\)\)"):
            d.reads(d)


def test_unread_output_is_an_error() -> None:
    c = fb.Composition()
    with c.scope():
        x = fb.Scalar().reads(c.input)
        fb.Function(torch.neg).reads(x)  # computed, then dropped
        c.output.reads(x)
    with pytest.raises(TypeError, match=r"the output of Function\(neg\) .* is never read"):
        Compiler(c)


def test_output_never_set_is_an_error() -> None:
    c = fb.Composition()
    with c.scope():
        fb.Scalar().reads(c.input)
    with pytest.raises(TypeError, match=r"Composition\(\) has no output: call \.output\.reads"):
        Compiler(c)


def test_wiring_mistakes() -> None:
    c, other = fb.Composition(), fb.Composition()
    with pytest.raises(RuntimeError, match=r"only be used inside `with composition.scope\(\):`"):
        fb.Scalar().reads(c.input)
    with c.scope():
        x = fb.Scalar().reads(c.input)
        with pytest.raises(ValueError, match=r"input of Scalar\('float32'\) is already wired"):
            x.reads(c.input)
        with pytest.raises(ValueError, match=r"cannot wire anything into"):
            c.input.reads(x)
        with pytest.raises(ValueError, match=r"belongs to another composition"):
            fb.Identity().reads(other.input)
        c.output.reads(x)
        with pytest.raises(ValueError, match=r"cannot read from its own output"):
            fb.Identity().reads(c.output)
        with pytest.raises(ValueError, match=r"output is already wired"):
            c.output.reads(x)


def test_bad_item_and_bad_input_type_name_the_composition() -> None:
    c = fb.Composition(name="c")
    with c.scope():
        x = fb.Scalar().reads(c.input)
        c.output.reads(fb.Identity().reads(x[0]))
    with pytest.raises(TypeError, match=r"reads item 0 of Scalar\('float32'\), which outputs"):
        Compiler(c)
    d = fb.Composition(name="d")
    with d.scope():
        d.output.reads(fb.Map(fb.Identity()).reads(fb.Scalar().reads(d.input)))
    with pytest.raises(TypeError, match=r"in Composition\(name='d'\): Map\(Identity\(\)\) expects"):
        Compiler(d >> fb.Sum())


def test_input_errors_report_the_path_through_input_items() -> None:
    c = fb.Composition()
    with c.scope():
        xs = fb.Map(fb.Scalar()).reads(c.input["xs"])
        c.output.reads(fb.Sum().reads(xs))
    comp = Compiler(c)
    with pytest.raises(fb.InputError, match=r"at input\[1\]\['xs'\]\[1\] in Scalar"):
        comp([{"xs": [1.0]}, {"xs": [1.0, "two"]}])
    with pytest.raises(fb.InputError, match=r"at input\[0\] in Map.*reads item 'xs'"):
        comp([{"ys": []}])


def test_slices_of_tuples_and_tuple_wires_from_the_input() -> None:
    c = fb.Composition()
    with c.scope():
        three = fb.AllOf(fb.Scalar(), fb.Scalar() >> fb.Function(torch.neg), fb.Scalar()).reads(
            c.input["x"]
        )
        pair = fb.Function(torch.mul).reads(three[1:])
        c.output.reads(fb.Function(torch.add).reads(pair, fb.Scalar().reads(c.input["y"])))
    check_block(c, [{"x": 2.0, "y": 1.0}], expected=[-3.0])
    d = fb.Composition()
    with d.scope():
        d.output.reads(fb.Record((fb.Scalar(), fb.Scalar())).reads(d.input["a"], d.input["b"]))
    with pytest.raises(
        fb.InputError, match=r"at input\[0\] in Record\(.*reads item 'b' of the input"
    ):
        Compiler(d >> fb.Function(torch.add))([{"a": 1.0}])
