"""The compiler traces through closures (``blocks/_closures.py``); they must record exactly what
the blocks' own ``_trace`` records, and fail with the same errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import foldexp.blocks as fb
from foldexp import Compiler
from foldexp.blocks._closures import trace_fn
from foldexp.compiler.trace import Trace, trace_batch
from foldexp.data.calculator import calculator_splits
from foldexp.data.vocab import Vocabulary
from foldexp.models.tree_lstm import TreeLSTMClassifier, random_tree, tree_lstm_classifier


def _slow_trace(compiler: Compiler, inputs: list[Any]) -> Trace:
    tr = Trace(compiler.ops)
    for k, x in enumerate(inputs):
        tr.current_input = k
        compiler.root._trace(tr, x)
    return tr


def _recorded(tr: Trace) -> dict[str, Any]:
    by_type = {
        t: (tr.const_vids[i], [np.asarray(p).tolist() for p in tr.const_payloads[i]])
        for i, t in enumerate(tr.types)
        if tr.const_vids[i]
    }
    return {
        "depths": tr.val_depth,
        "ops": (tr.op_depth, tr.op_first, tr.op_args),
        "constants": by_type,
        "metrics": tr.metrics,
    }


def _case_nested_tuples() -> tuple[Compiler, list[Any]]:
    rng = np.random.default_rng(1)
    trees = [random_tree(int(n), 20, rng) for n in rng.integers(1, 12, size=9)]
    return Compiler(tree_lstm_classifier(20, 4, 6, 3)), trees


def _case_labelled_trees() -> tuple[Compiler, list[Any]]:
    train, _, _ = calculator_splits(15, max_depth=4, seed=3)
    vocab = Vocabulary.from_trees(train)
    model = TreeLSTMClassifier(vocab, 10, 4, 5, internal_words=True)
    return model.compiler, train


def _case_sequences() -> tuple[Compiler, list[Any]]:
    block = fb.Map(fb.Vector(2)) >> fb.Fold(fb.Concat() >> fb.FC(2), fb.Zeros(2))
    return Compiler(block), [[[1.0, 2.0]] * n for n in range(5)]


@pytest.mark.parametrize("case", [_case_nested_tuples, _case_labelled_trees, _case_sequences])
def test_closures_record_what_trace_records(case: Any) -> None:
    compiler, inputs = case()
    fast, _ = trace_batch(compiler.root, compiler.ops, inputs, compiler.output_type)
    assert _recorded(fast) == _recorded(_slow_trace(compiler, inputs))


def test_a_block_overriding_trace_is_traced_by_its_own_method() -> None:
    calls = []

    class Logged(fb.Identity):
        def _trace(self, tr: Any, x: Any) -> Any:
            calls.append(x)
            return x

    fn = trace_fn(fb.GetItem(0) >> Logged(), Trace([]))
    assert fn((7, 8)) == 7 and calls == [7]


@pytest.mark.parametrize(
    ("block", "bad", "message"),
    [
        (fb.GetItem(1) >> fb.Scalar(), [(3,)], r"at input\[0\] in GetItem\(1\): cannot take item"),
        (fb.Scalar("int64"), [1, 2.5], r"at input\[1\] in Scalar\('int64'\): expected an integer"),
        (fb.Record({"a": fb.Scalar()}), [{"b": 1}], r"input has no field 'a'"),
        (fb.Record({"a": fb.Scalar()}), [{"a": "x"}], r"at input\[0\]\['a'\] in Scalar"),
        (
            fb.OneOf(len, {1: fb.GetItem(0) >> fb.Scalar()}),
            [(1, 2)],
            r"key 2 matches no case; cases are \[1\]",
        ),
        (fb.InputTransform(lambda x: 1 / x) >> fb.Scalar(), [0], r"ZeroDivisionError"),
        (fb.Map(fb.Scalar()) >> fb.Sum(), [[1.0], [2.0, "x"]], r"at input\[1\]\[1\] in Scalar"),
        (
            # the combine reads (state, element): element 1 of input 0 is field 1 of the pair
            fb.Fold(
                fb.Record((fb.Identity(), fb.Scalar())) >> fb.Function(torch.add), fb.Zeros(())
            ),
            [[1.0, None]],
            r"at input\[0\]\[1\]\[1\] in Scalar",
        ),
    ],
)
def test_closure_errors_match_the_blocks(block: fb.Block, bad: list[Any], message: str) -> None:
    compiler = Compiler(block, input_type=None)
    with pytest.raises(fb.InputError, match=message):
        compiler.build(bad)
