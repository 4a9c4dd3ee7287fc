"""Depth batching with ``sinks_last`` (by default where the model is on a GPU) runs *sinks*
(invocations whose outputs no other invocation reads) at the batch's deepest depth
(``sinks.depths_with_sinks_last``): a classifier over the roots of trees of different heights is
one call, not one per height, with the same values and gradients; random ops keep their depths;
every invocation still runs after its arguments; the CPU keeps the paper's depths."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import foldexp.blocks as fb
from foldexp import Compiler
from foldexp.models.tree_lstm import binary_tree_lstm, random_tree
from foldexp.testing import check_block


def _trees(rng: np.random.Generator, count: int = 24) -> list:
    return [random_tree(int(n), 30, rng) for n in rng.integers(1, 30, size=count)]


def _calls(compiler: Compiler, inputs: list, name: str) -> list[int]:
    """The depths at which ``compiler``'s plan for ``inputs`` calls the op named ``name``."""
    plan = compiler.build(inputs)
    return [g.depth for g in plan.groups if plan.op_names[g.op] == name]


def _height(tree: tuple) -> int:
    return 1 if len(tree) == 1 else 1 + max(_height(t) for t in tree)


def _classifier(head: torch.nn.Module) -> fb.Block:
    return binary_tree_lstm(30, 6, 6) >> fb.GetItem(0) >> fb.Function(head)


def test_the_classifier_over_roots_of_every_height_is_one_call(rng) -> None:
    trees = _trees(rng)
    assert len({_height(t) for t in trees}) > 5
    block = _classifier(torch.nn.Linear(6, 3))
    plan = Compiler(block, sinks_last=True).build(trees)
    heads = [g for g in plan.groups if plan.op_names[g.op] == "Linear"]
    assert len(heads) == 1 and heads[0].count == len(trees), plan.describe()
    assert heads[0].depth == plan.max_depth == max(_height(t) for t in trees) + 1
    # batched == eager, values and gradients
    assert check_block(block, trees, sinks_last=True).last_stats["calls"] == len(plan.groups)


def test_every_invocation_still_runs_after_its_arguments(rng) -> None:
    trees = _trees(rng, 16)
    plan = Compiler(_classifier(torch.nn.Linear(6, 3)), sinks_last=True).build(trees)
    # per type, the depth of the group that wrote each row (constants: 0); a gather may only
    # read rows written at a lower depth
    written = [np.zeros(rows, dtype=np.int64) for rows in plan.rows_per_type]
    for g in plan.groups:
        for ga in g.gathers:
            rows = ga.rows
            idx = np.arange(rows.start, rows.stop) if isinstance(rows, slice) else rows.numpy()
            assert (written[ga.tid][idx] < g.depth).all(), plan.describe()
        for tid, start, end in g.outs:
            written[tid][start:end] = g.depth


def test_a_random_sink_keeps_its_depths(rng) -> None:
    # A dropout in training mode draws its numbers call by call: its calls stay where the
    # paper puts them, one per height of the roots.
    head = torch.nn.Sequential(torch.nn.Dropout(0.5), torch.nn.Linear(6, 3))
    compiler = Compiler(_classifier(head), sinks_last=True)
    trees = _trees(rng)
    compiler.train()
    assert len(_calls(compiler, trees, "Sequential")) == len({_height(t) for t in trees})
    compiler.eval()  # no longer random: one call
    assert _calls(compiler, trees, "Sequential") == [compiler.build(trees).max_depth]


def test_sinks_last_takes_true_false_or_none() -> None:
    with pytest.raises(ValueError, match=r"sinks_last='yes'; expected True, False or None"):
        Compiler(_classifier(torch.nn.Linear(6, 3)), sinks_last="yes")


def test_a_gpu_model_runs_sinks_last_and_a_cpu_model_the_papers_depths(rng) -> None:
    trees = _trees(rng)
    heights = len({_height(t) for t in trees})
    compiler = Compiler(_classifier(torch.nn.Linear(6, 3)), cache_traces=True)
    assert len(_calls(compiler, trees, "Linear")) == heights  # the CPU: one call per height
    compiler.build(trees)  # built twice: the plan is kept, under the CPU's order
    compiler.to("meta")  # as on a GPU: not the CPU
    assert _calls(compiler, trees, "Linear") == [compiler.build(trees).max_depth]
    compiler.to_empty(device="cpu")
    assert len(_calls(compiler, trees, "Linear")) == heights


def test_a_plan_kept_in_eval_mode_is_not_served_to_training(rng) -> None:
    # Without merging the plan still depends on which ops are random (sinks last keeps a
    # dropout's depths in training): the kept eval plan, with the dropout in one call, would
    # draw other masks than a training build does.
    head = torch.nn.Sequential(torch.nn.Dropout(0.5), torch.nn.Linear(6, 3))
    block = _classifier(head)
    trees = _trees(rng)
    kept = Compiler(block, sinks_last=True, merge_duplicates=False, cache_plans=True)
    kept.eval()
    kept.build(trees)
    kept.build(trees)  # built twice: kept
    kept.train()
    fresh = Compiler(block, sinks_last=True, merge_duplicates=False)
    assert _calls(kept, trees, "Sequential") == _calls(fresh, trees, "Sequential")
    assert len(_calls(fresh, trees, "Sequential")) == len({_height(t) for t in trees})
    torch.manual_seed(0)
    a = kept(trees)
    torch.manual_seed(0)
    torch.testing.assert_close(a, fresh(trees))
