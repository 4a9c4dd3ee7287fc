"""Native tracing (``compiler/native_trace.py``) records exactly what the Python closures record,
value by value, and fails with the same errors; inputs it cannot walk go to Python."""

from __future__ import annotations

import gc
import threading
import weakref
from typing import Any

import numpy as np
import pytest
import torch

import foldexp.blocks as fb
import foldexp.kernels.native as native
from foldexp import Compiler
from foldexp.compiler import merge, native_trace
from foldexp.compiler.native_trace import native_trace_fn, native_tracing_available
from foldexp.compiler.trace import Trace, trace_batch
from foldexp.data.calculator import calculator_splits
from foldexp.data.vocab import Vocabulary
from foldexp.models.tree_lstm import TreeLSTMClassifier, random_tree, tree_lstm_classifier
from foldexp.types import TensorType, TupleType

pytestmark = pytest.mark.skipif(
    not native_tracing_available(), reason="native tracing needs a C++ compiler and Python.h"
)


@pytest.fixture
def python_tracing(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A function switching native code off (``device.fused_cells=false``) for the test."""
    return lambda: monkeypatch.setattr(native, "_switch", False)


def _recorded(tr: Trace, out: np.ndarray) -> dict[str, Any]:
    payloads = [[(type(p), np.asarray(p).tolist()) for p in ps] for ps in tr.const_payloads]
    return {
        "depths": list(tr.val_depth),
        "ops": (tr.op_depth, tr.op_first, tr.op_args),
        "constants": (tr.types, tr.const_vids, payloads),
        "metrics": tr.metrics,
        "out": out.tolist(),
    }


def _both(
    compiler: Compiler, inputs: list[Any], fuse: bool, off: Any, fallbacks: int = 0
) -> tuple[dict, dict]:
    """The records of native and of Python tracing; the native walk must have finished every
    input but ``fallbacks`` itself (a fallback would hide a wrong native walk)."""
    rollbacks = []
    rollback = Trace.rollback
    Trace.rollback = lambda tr, n: (rollbacks.append(n), rollback(tr, n))[1]  # type: ignore
    try:
        batch = trace_batch(compiler.root, compiler.ops, inputs, compiler.output_type, fuse)
    finally:
        Trace.rollback = rollback  # type: ignore[method-assign]
    fast = _recorded(*batch)
    # the deep input is rolled back twice: after the native walk, after the Python closures
    assert len(rollbacks) == 2 * fallbacks
    off()
    slow = _recorded(*trace_batch(compiler.root, compiler.ops, inputs, compiler.output_type, fuse))
    return fast, slow


def _trees() -> tuple[Compiler, list[Any]]:
    rng = np.random.default_rng(1)
    trees = [random_tree(int(n), 20, rng) for n in rng.integers(1, 40, size=30)]
    return Compiler(tree_lstm_classifier(20, 4, 6, 3)), trees


def _labelled_trees() -> tuple[Compiler, list[Any]]:
    train, _, _ = calculator_splits(25, max_depth=5, seed=3)
    model = TreeLSTMClassifier(Vocabulary.from_trees(train), 10, 4, 5, internal_words=True)
    return model.compiler, train


def _sequences() -> tuple[Compiler, list[Any]]:
    block = fb.Map(fb.Vector(2)) >> fb.Fold(fb.Concat() >> fb.FC(2), fb.Zeros(2))
    return Compiler(block), [[[1.0, 2.0]] * n for n in range(5)]


def _odd_payloads() -> tuple[Compiler, list[Any]]:
    # numpy scalars, bools and floats into Scalar, negative and dict keys, lists for tuples,
    # a pre block, a three-way AllOf, Identity, a nested tuple op output
    pair = fb.AllOf(fb.GetItem(-1) >> fb.Scalar(), fb.GetItem(0) >> fb.Scalar(), fb.Identity())
    block = fb.Record({"a": fb.Scalar("int64"), "b": fb.Scalar()}) >> fb.AllOf(
        fb.GetItem(0) >> fb.Function(lambda x: (x, (x, x))),
        fb.GetItem(1),
    )
    inputs = [{"a": 3, "b": 2.5}, {"a": np.int64(4), "b": True}, {"a": True, "b": np.float32(1)}]
    keyed = fb.OneOf(lambda x: x["k"], {0: fb.Scalar(), 1: fb.Zeros(())},
                     pre_block=fb.GetItem("v"))  # fmt: skip
    listed = fb.InputTransform(list) >> fb.AllOf(
        fb.GetItem(0) >> fb.Scalar(), pair >> fb.GetItem(0), fb.GetItem(1) >> fb.Scalar()
    )
    return Compiler(
        fb.AllOf(
            fb.GetItem(0) >> block,
            fb.GetItem(1) >> keyed,
            fb.GetItem(2) >> listed,
        ),
        input_type=None,
    ), [(inputs[k % 3], {"k": k % 2, "v": float(k)}, (k, k + 1.0)) for k in range(7)]


def _metrics() -> tuple[Compiler, list[Any]]:
    pair = fb.AllOf(fb.GetItem(0) >> fb.Scalar(), fb.GetItem(1) >> fb.Scalar())
    block = pair >> fb.Function(torch.add) >> fb.Metric("m")
    return Compiler(block, input_type=None), [(k, 2.0 * k) for k in range(4)]


@pytest.mark.parametrize("fuse", [False, True])
@pytest.mark.parametrize("case", [_trees, _labelled_trees, _sequences, _odd_payloads, _metrics])
def test_native_records_what_python_records(case: Any, fuse: bool, python_tracing: Any) -> None:
    compiler, inputs = case()
    fast, slow = _both(compiler, inputs, fuse, python_tracing)
    assert fast == slow


def test_the_native_walk_serves_trees_without_python_fallbacks() -> None:
    compiler, trees = _trees()
    tr = Trace(compiler.ops)
    run = native_trace_fn(compiler.root, tr)
    outs = [run(t) for t in trees]
    assert isinstance(run, native_trace._NativeRun) and run.fallbacks == 0
    assert len(outs) == len(trees) and tr.num_values > 2 * len(trees)


def test_an_input_deeper_than_the_native_limit_is_traced_by_python_then_run_steps(
    python_tracing: Any,
) -> None:
    chain: tuple = (1,)
    for k in range(2500):  # ~10,000 nested nodes: past the native limit and Python's stack
        chain = (chain, (k % 20,))
    compiler = Compiler(tree_lstm_classifier(20, 4, 6, 3))
    inputs = [chain, random_tree(5, 20, np.random.default_rng(0))]
    fast, slow = _both(compiler, inputs, False, python_tracing, fallbacks=1)
    assert fast == slow


@pytest.mark.parametrize(
    ("block", "bad", "message"),
    [
        (fb.GetItem(1) >> fb.Scalar(), [(3,)], r"at input\[0\] in GetItem\(1\): cannot take item"),
        (fb.GetItem("k") >> fb.Scalar(), [{"j": 1}], r"GetItem\('k'\): cannot take item"),
        (fb.Scalar("int64"), [1, 2.5], r"at input\[1\] in Scalar\('int64'\): expected an integer"),
        (fb.Scalar(), [1, "x"], r"at input\[1\] in Scalar"),
        (
            fb.OneOf(len, {1: fb.GetItem(0) >> fb.Scalar()}),
            [(1,), (1, 2)],
            r"at input\[1\].*key 2 matches no case; cases are \[1\]",
        ),
        (fb.OneOf(len, {1: fb.GetItem(0) >> fb.Scalar()}), [(1,), 5], r"at input\[1\] in OneOf"),
        (
            fb.OneOf(lambda x: 1 / x, {1.0: fb.Scalar()}),
            [1, 0],
            r"at input\[1\] in OneOf",
        ),
    ],
)
def test_native_errors_are_the_blocks_errors(block: fb.Block, bad: list[Any], message: str) -> None:
    compiler = Compiler(block, input_type=None)
    with pytest.raises(fb.InputError, match=message):
        compiler.build(bad)


def test_a_batch_after_a_failed_input_traces_from_a_clean_trace() -> None:
    tree = fb.ForwardDeclaration(name="t")
    pair = fb.AllOf(fb.GetItem(0) >> tree(), fb.GetItem(1) >> tree()) >> fb.Function(torch.add)
    leaf = fb.GetItem(0) >> fb.Scalar() >> fb.Function(lambda x: x.unsqueeze(1) * 2)
    tree.resolve_to(fb.OneOf(len, {1: leaf, 2: pair}))
    compiler = Compiler(tree(), input_type=None)
    # a tree whose deep leaf holds a string: the walk has recorded much before it fails there
    bad = (((1.0,), ((2.0,), ("x",))), (3.0,))
    with pytest.raises(
        fb.InputError, match=r"at input\[1\] in Scalar\('float32'\): expected a number"
    ):
        compiler.build([((1.0,), (2.0,)), bad])
    good = [((1.0,), (2.0,)), ((4.0,), ((5.0,), (6.0,)))]
    expected = torch.tensor([[6.0], [30.0]])
    torch.testing.assert_close(compiler(good), expected)


def test_the_switch_off_traces_with_python_closures(python_tracing: Any) -> None:
    python_tracing()
    compiler, _ = _trees()
    assert not isinstance(native_trace_fn(compiler.root, Trace(compiler.ops)),
                          native_trace._NativeRun)  # fmt: skip


@pytest.mark.parametrize(
    ("values", "native"),
    [
        (list(range(-300, 300)), True),
        ([2**63 - 1] * 300, True),
        ([2**63] * 300, False),  # numpy makes uint64 of it: numpy decides
        ([1] * 299 + [True], False),
        ([1] * 299 + [2.0], False),
        ([1] * 299 + [np.int64(2)], False),
        ([1] * 10, False),  # short lists: numpy
    ],
)
def test_exact_int64_is_numpys_array_of_exact_ints_only(values: list, native: bool) -> None:
    trace_batch(*(lambda c: (c.root, c.ops, [(1,)], c.output_type))(_trees()[0]))  # loads it
    out = native_trace.exact_int64(values)
    assert (out is not None) == native
    if native:
        assert out.dtype == np.int64 and out.tolist() == np.asarray(values).tolist()
    if not isinstance(values[-1], float) and values[0] < 2**63:
        assert native_trace.int64_array(values).tolist() == [int(v) for v in values]


# ---- found by review: each failed before its fix ----------------------------------------------
T = TensorType((), torch.float32)
PAIRS = TupleType(TupleType(T, T), TupleType(T, T))


class _Pairs(fb.Block):
    """A user block on traced values whose first item, iterated, empties the list holding it."""

    def __init__(self) -> None:
        super().__init__(PAIRS, PAIRS)

    def _infer(self, t: Any) -> Any:
        return PAIRS

    def _trace(self, tr: Any, x: Any) -> Any:
        out: list[Any] = []

        class First:
            def __iter__(self) -> Any:
                out.clear()
                return iter(x[0])

        out += [First(), tuple(x[1])]
        return out


def _scalars(n: int) -> list[fb.Block]:
    return [fb.GetItem(k) >> fb.Scalar() for k in range(n)]


def test_values_freed_by_user_code_during_the_walk_are_not_read(python_tracing: Any) -> None:
    s = _scalars(4)
    block = fb.AllOf(fb.AllOf(s[0], s[1]), fb.AllOf(s[2], s[3])) >> _Pairs()
    compiler = Compiler(block >> fb.Function(lambda a, b: a[0] + b[1]), input_type=None)
    errors = []
    for switch_off in (lambda: None, python_tracing):
        switch_off()
        with pytest.raises(IndexError) as e:  # the closures' flatten meets the emptied list
            compiler([(1.0, 2.0, 3.0, 4.0)])  # (the native walk read freed memory here)
        errors.append(str(e.value))
    assert errors[0] == errors[1]


def test_a_model_referenced_by_its_own_blocks_is_freed() -> None:
    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            block = fb.OneOf(self.kind, {0: fb.Scalar(), 1: fb.Zeros(())})
            self.compiler = Compiler(block, input_type=None, cache_traces=True)

        def kind(self, x: Any) -> int:
            return int(x is None)

    model = Model()
    model.compiler([1.0, None])
    alive = weakref.ref(model)
    del model
    gc.collect()
    assert alive() is None


def test_an_input_error_carries_no_trace_of_the_native_walk() -> None:
    compiler = Compiler(fb.GetItem(0) >> fb.Scalar("int64"), input_type=None)
    with pytest.raises(fb.InputError) as e:
        compiler.build([(1,), ("x",)])
    assert e.value.__context__ is None


def test_a_one_of_with_a_pre_block_registers_types_in_the_closures_order(
    python_tracing: Any,
) -> None:
    block = fb.OneOf(
        lambda x: 0,
        {0: fb.AllOf(fb.GetItem(0), fb.GetItem(1) >> fb.Scalar("int64"))},
        pre_block=fb.AllOf(fb.GetItem(0) >> fb.Scalar("float32"), fb.GetItem(1)),
    )
    fast, slow = _both(Compiler(block, input_type=None), [(1.0, 2)], False, python_tracing)
    assert fast == slow


def test_an_op_on_a_one_tuple_traces_alike(python_tracing: Any) -> None:
    compiler = Compiler(fb.AllOf(fb.Scalar()) >> fb.Function(lambda t: t * 2), input_type=None)
    fast, slow = _both(compiler, [1.0, 2.0], False, python_tracing)
    assert fast == slow


def test_a_deep_input_in_a_thread_with_a_small_stack() -> None:
    chain: tuple = (1,)
    for k in range(1400):
        chain = (chain, (k % 20,))
    compiler = Compiler(tree_lstm_classifier(20, 4, 6, 3))
    shapes = []
    threading.stack_size(256 * 1024)
    try:
        worker = threading.Thread(target=lambda: shapes.append(compiler([chain]).shape))
        worker.start()
        worker.join()
    finally:
        threading.stack_size(0)
    assert shapes == [torch.Size([1, 3])]


@pytest.mark.parametrize("width", [1, 2, 4])
@pytest.mark.parametrize("high", [3, 50, 2**62])
def test_distinct_rows_by_hashing_equal_numpys(width: int, high: int, python_tracing: Any) -> None:
    trace_batch(*(lambda c: (c.root, c.ops, [(1,)], c.output_type))(_trees()[0]))  # loads it
    rng = np.random.default_rng(width * 7 + high % 1000)
    rows = rng.integers(0, high, size=(3000, width))  # row numbers: never negative
    rows[100:400] = rows[:300]  # repeats at any range
    values = rows[:, 0].copy()
    hashed = native_trace.distinct_int64_rows(rows)
    assert hashed is not None
    scalars = merge.distinct_scalars(values)
    python_tracing()
    assert native_trace.distinct_int64_rows(rows) is None
    for got, want in zip(hashed, merge.distinct_rows(rows)):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(scalars, merge.distinct_scalars(values)):  # type: ignore[arg-type]
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("keys", [(1, 2), (True, 2), (1.0, 2), (1, 70)])
def test_a_one_of_keyed_by_len_finds_the_dicts_case(keys: tuple, python_tracing: Any) -> None:
    one, two = keys  # True and 1.0 equal 1 as dict keys; 70 is past the native length table
    block = fb.OneOf(len, {one: fb.GetItem(0) >> fb.Scalar(), two: fb.Zeros(())})
    inputs = [(1.0,), tuple(float(k) for k in range(two)), (4.0,)]
    fast, slow = _both(Compiler(block, input_type=None), inputs, False, python_tracing)
    assert fast == slow


def test_hashed_merging_takes_any_int64_array_and_any_seed(python_tracing: Any) -> None:
    trace_batch(*(lambda c: (c.root, c.ops, [(1,)], c.output_type))(_trees()[0]))  # loads it
    unaligned = np.frombuffer(bytes(8 * 60 + 1), dtype=np.int64, offset=1)  # numpy's "=q"
    rows = np.random.default_rng(3).integers(0, 9, size=(400, 2))
    module = native_trace._module
    outs = [[np.empty(len(rows), np.int64) for _ in range(3)] for _ in range(2)]
    found = [module.distinct_rows(rows, 2, *out, seed) for out, seed in zip(outs, (1, 2**64 - 1))]
    m = found[0]
    assert found[1] == m and all(np.array_equal(a[:m], b[:m]) for a, b in zip(*outs))
    assert np.array_equal(outs[0][0], outs[1][0])  # every row's slot
    with pytest.raises(ValueError, match="overlap"):
        module.distinct_rows(rows, 2, outs[0][0], outs[0][0], outs[0][2], 1)
    hashed = merge.distinct_scalars(unaligned), merge.distinct_rows(rows)
    python_tracing()
    for got, want in zip(hashed, (merge.distinct_scalars(unaligned), merge.distinct_rows(rows))):
        for a, b in zip(got, want):  # type: ignore[arg-type]
            np.testing.assert_array_equal(a, b)


class _Reversed(list):
    """A list whose own iteration order is reversed: ``Map`` and ``Fold`` iterate it so."""

    def __iter__(self) -> Any:
        return reversed(list(super().__iter__()))


def test_records_and_sequences_read_their_items_as_python_does(python_tracing: Any) -> None:
    add = fb.Function(torch.add)
    block = fb.AllOf(
        fb.GetItem(0) >> fb.Record([(-1, fb.Scalar()), (0, fb.Scalar())]) >> add,
        fb.GetItem(1) >> fb.Map(fb.Scalar()) >> fb.Sum(),
        fb.GetItem(1) >> fb.Fold(fb.Record((fb.Identity(), fb.Scalar())) >> add, fb.Zeros(())),
    )
    inputs = [
        ((1.0, 2.0, 3.0), seq) for seq in ([1.0, 2.0], (3.0, 4.0, 5.0), _Reversed([6.0, 7.0]))
    ]
    inputs.append(([4.0, 5.0], [8.0]))  # a list for the record
    fast, slow = _both(Compiler(block, input_type=None), inputs, False, python_tracing)
    assert fast == slow
