"""DyNet's agenda order (``Compiler(schedule_order="agenda")``): the same values and gradients
as depth batching, and never more calls on these workloads."""

from __future__ import annotations

import numpy as np
import pytest

import foldexp.blocks as fb
from foldexp import Compiler
from foldexp.compiler.agenda import agenda_levels
from foldexp.compiler.trace import trace_batch
from foldexp.models.tree_lstm import random_tree, tree_lstm_classifier
from foldexp.testing import assert_compilers_agree


def _agree(block: fb.Block, inputs: list) -> tuple[int, int]:
    depth, agenda = Compiler(block), Compiler(block, schedule_order="agenda")
    assert_compilers_agree(depth, agenda, inputs)
    return depth.last_stats["calls"], agenda.last_stats["calls"]


def test_trees_of_different_heights_share_the_classifier_call(rng) -> None:
    trees = [random_tree(int(n), 30, rng) for n in rng.integers(1, 40, size=64)]
    by_depth, by_agenda = _agree(tree_lstm_classifier(30, 6, 6, 3), trees)
    assert by_agenda < by_depth


def test_depths_with_sinks_last_need_no_more_calls_than_the_agenda(rng) -> None:
    # The order a GPU run takes (``Compiler(sinks_last=True)``): the classifier waits for every
    # root as the agenda's does, the cells stay batched by depth.
    trees = [random_tree(int(n), 30, rng) for n in rng.integers(1, 40, size=64)]
    block = tree_lstm_classifier(30, 6, 6, 3)
    sinks, agenda = Compiler(block, sinks_last=True), Compiler(block, schedule_order="agenda")
    assert_compilers_agree(sinks, agenda, trees)
    assert sinks.last_stats["calls"] <= agenda.last_stats["calls"]


def test_sequences_agree(rng) -> None:
    rnn = fb.Map(fb.Vector(2)) >> fb.Fold(fb.Concat() >> fb.FC(2), fb.Zeros(2))
    seqs = [rng.normal(size=(int(n), 2)).tolist() for n in rng.integers(0, 9, size=10)]
    by_depth, by_agenda = _agree(rnn >> fb.FC(3), seqs)
    assert by_agenda <= by_depth


def test_every_invocation_runs_after_its_arguments(rng) -> None:
    compiler = Compiler(tree_lstm_classifier(30, 6, 6, 3))
    trees = [random_tree(int(n), 30, rng) for n in rng.integers(1, 20, size=16)]
    trace, _ = trace_batch(compiler.root, compiler.ops, trees, compiler.output_type, fuse=True)
    steps = agenda_levels(trace)
    step_of_value = np.full(trace.num_values, -1)
    for i, op in enumerate(trace.ops):
        first = np.asarray(trace.op_first[i], dtype=np.int64)
        for k in range(op.n_out):
            step_of_value[first + k] = steps[i]
    for i, op in enumerate(trace.ops):
        if not len(steps[i]):
            continue
        args = np.asarray(trace.op_args[i]).reshape(len(steps[i]), len(op.in_types))
        assert (step_of_value[args].max(axis=1) < steps[i]).all()


def test_an_unknown_order_fails_at_construction() -> None:
    with pytest.raises(ValueError, match=r"schedule_order='dynet'; expected one of"):
        Compiler(fb.Vector(2) >> fb.FC(2), schedule_order="dynet")
