"""Merging equal invocations (``Compiler(merge_duplicates=True)``, the default): each distinct
computation runs once, with the same values and gradients as computing every invocation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn.modules.module import register_module_module_registration_hook

import foldexp.blocks as fb
from foldexp import Compiler
from foldexp.compiler.merge import distinct_rows, distinct_scalars
from foldexp.data.calculator import calculator_splits
from foldexp.data.vocab import Vocabulary
from foldexp.models.tree_lstm import TreeLSTMClassifier, random_tree, tree_lstm_classifier
from foldexp.testing import assert_compilers_agree, check_block


def _pair(block: fb.Block, **kw) -> tuple[Compiler, Compiler]:
    return Compiler(block, merge_duplicates=False, **kw), Compiler(block, **kw)


@pytest.mark.parametrize("order", ["depth", "agenda"])
def test_repeated_words_merge_with_the_same_values_and_gradients(rng, order) -> None:
    trees = [random_tree(int(n), 7, rng) for n in rng.integers(1, 25, size=40)]
    plain, merged = _pair(tree_lstm_classifier(7, 5, 6, 3), schedule_order=order)
    assert_compilers_agree(plain, merged, trees)
    plan = merged.build(trees)
    leaves = sum(str(t).count(",)") for t in trees)
    assert plan.num_merged >= leaves - 7  # at most one leaf computation per word
    assert plan.num_nodes == plain.build(trees).num_nodes  # counted, not computed
    assert sum(g.count for g in plan.groups) == plan.num_nodes - plan.num_merged


def test_merging_matches_the_eager_oracle(rng) -> None:
    trees = [random_tree(int(n), 4, rng) for n in rng.integers(1, 12, size=20)]
    compiler = check_block(tree_lstm_classifier(4, 3, 5, 2), trees)
    assert compiler.last_stats["merged"] > 0


def test_equal_subtrees_merge_all_the_way_up(rng) -> None:
    tree = random_tree(20, 50, rng)
    plain, merged = _pair(tree_lstm_classifier(50, 4, 4, 2))
    batch = [tree, tree, tree]
    assert_compilers_agree(plain, merged, batch)
    plan = merged.build(batch)
    # Two of the three copies are merged entirely: every one of their invocations.
    assert plan.num_merged >= 2 * plan.num_nodes // 3


def test_metrics_of_merged_values_keep_one_row_per_occurrence() -> None:
    h = fb.Scalar("int64") >> fb.Function(nn.Embedding(5, 3)) >> fb.Metric("h")
    block = fb.Map(h) >> fb.Void()
    compiler = Compiler(fb.Map(fb.Scalar("int64") >> fb.Function(nn.Embedding(5, 3))) >> fb.Sum())
    words = [[1, 2, 1], [2, 2]]
    torch.testing.assert_close(
        compiler(words), Compiler(compiler.root, merge_duplicates=False)(words)
    )
    recorder = Compiler(block)
    recorder(words)
    values, inputs = recorder.last_metrics["h"]
    table = recorder.ops[0].parameters()[0]
    assert inputs.tolist() == [0, 0, 0, 1, 1]
    torch.testing.assert_close(values, table[[1, 2, 1, 2, 2]])


def test_training_dropout_is_not_merged_and_eval_dropout_is() -> None:
    drop = nn.Dropout(0.5)
    block = fb.Map(fb.Scalar("int64") >> fb.Function(nn.Embedding(4, 8)) >> fb.Function(drop))
    block = block >> fb.Sum()
    compiler = Compiler(block)
    words = [[1, 1, 1, 1], [1, 2]]
    compiler.train()
    assert compiler.build(words).num_merged == 0
    compiler.eval()
    plan = compiler.build(words)
    assert plan.num_merged > 0
    compiler.train()  # a plan that merged a now-random op must not run
    with pytest.raises(RuntimeError, match="random now.*merge_duplicates=False"):
        compiler.run(plan)


def test_dropout_added_or_switched_after_compiling_is_seen() -> None:
    # ``Op.is_random`` keeps the list of an op's random modules until some module anywhere
    # gains a submodule: a dropout put into the cell after the compiler was made counts.
    cell = nn.Sequential(nn.Linear(8, 8))
    block = fb.Map(fb.Scalar("int64") >> fb.Function(nn.Embedding(4, 8)) >> fb.Function(cell))
    compiler = Compiler(block >> fb.Sum())
    words = [[1, 1, 1, 1], [1, 2]]
    compiler.train()
    assert compiler.build(words).num_merged > 0
    cell.append(nn.Dropout(0.5))
    assert compiler.build(words).num_merged == 0
    cell[1].p = 0.0  # a dropout of p=0 is not random
    assert compiler.build(words).num_merged > 0
    cell[1].p = 0.5
    compiler.eval()
    assert compiler.build(words).num_merged > 0
    cell.extra = nn.RReLU()
    compiler.train()
    cell[1].p = 0.0
    assert compiler.build(words).num_merged == 0


@pytest.mark.parametrize("how", ["insert", "modules", "swap", "dict"])
def test_dropout_put_in_past_the_registration_hook_is_seen(how: str) -> None:
    # ``Sequential.insert`` and writes into ``_modules`` (quantization's ``convert`` swaps
    # children so) call no registration hook; the op notices its modules' children changed,
    # their count (insert, a new key) or not (a child replaced, the whole dict replaced).
    cell = nn.Sequential(nn.Linear(8, 8), nn.Tanh())
    block = fb.Map(fb.Scalar("int64") >> fb.Function(nn.Embedding(4, 8)) >> fb.Function(cell))
    compiler = Compiler(block >> fb.Sum())
    words = [[1, 1, 1, 1], [1, 2]]
    assert compiler.build(words).num_merged > 0
    if how == "insert":
        cell.insert(0, nn.Dropout(0.5))
    elif how == "modules":
        cell._modules["2"] = nn.Dropout(0.5)
    elif how == "swap":
        cell._modules["1"] = nn.Dropout(0.5)
    else:
        cell._modules = {**cell._modules, "1": nn.Dropout(0.5)}
    assert compiler.build(words).num_merged == 0


def test_dropout_stored_after_its_registration_hook_ran_is_seen() -> None:
    # torch calls the registration hook before it stores the child: a walk in between (another
    # thread; here a hook registered after foldexp's) must not keep the old children.
    cell = nn.Sequential(nn.Linear(8, 8), nn.Tanh())
    block = fb.Map(fb.Scalar("int64") >> fb.Function(nn.Embedding(4, 8)) >> fb.Function(cell))
    compiler = Compiler(block >> fb.Sum())
    words = [[1, 1, 1, 1], [1, 2]]

    def walk_now(module: nn.Module, name: str, submodule: nn.Module) -> None:
        for op in compiler.ops:
            op.is_random()

    handle = register_module_module_registration_hook(walk_now)
    try:
        cell[1] = nn.Dropout(0.5)
    finally:
        handle.remove()
    assert compiler.build(words).num_merged == 0


def test_function_declared_random_is_never_merged() -> None:
    noisy = fb.Function(lambda x: x + torch.rand_like(x), random=True)
    compiler = Compiler(fb.Map(fb.Scalar() >> noisy) >> fb.Sum())
    assert compiler.build([[1.0, 1.0, 1.0]]).num_merged == 0
    quiet = Compiler(fb.Map(fb.Scalar() >> fb.Function(lambda x: x * 2)) >> fb.Sum())
    assert quiet.build([[1.0, 1.0, 1.0]]).num_merged == 2


def test_describe_shows_merged_invocations(rng) -> None:
    trees = [random_tree(8, 3, rng) for _ in range(4)]
    text = Compiler(tree_lstm_classifier(3, 2, 2, 2)).build(trees).describe()
    assert "merged" in text.splitlines()[0] and "(+" in text


def _reference(rows: np.ndarray) -> tuple[list[int], list[int], list[bool]]:
    first: dict[tuple, int] = {}
    for i, r in enumerate(map(tuple, rows.tolist())):
        first.setdefault(r, i)
    keep = sorted(first.values())
    slot_of = {tuple(rows[k].tolist()): s for s, k in enumerate(keep)}
    keys = [tuple(r) for r in rows.tolist()]
    return keep, [slot_of[k] for k in keys], [keys.count(k) > 1 for k in keys]


@pytest.mark.parametrize("width, high", [(1, 5), (2, 9), (4, 3), (3, 1 << 40)])
def test_distinct_rows_matches_a_dictionary(rng, width, high) -> None:
    rows = rng.integers(0, high, size=(60, width))
    if high > 1 << 30:  # huge values: keys must be re-ranked, not overflow
        rows[::3] = rows[1::3][: len(rows[::3])]
    keep, slot, repeated = distinct_rows(rows)
    ref = _reference(rows)
    assert keep.tolist() == ref[0] and slot.tolist() == ref[1] and repeated.tolist() == ref[2]


def test_distinct_scalars() -> None:
    values, slot, repeated = distinct_scalars([3, 1, 3, 2])
    assert values.tolist() == [1, 2, 3] and slot.tolist() == [2, 0, 2, 1]
    assert repeated.tolist() == [True, False, True, False]
    assert distinct_scalars([1, 2, 3]) is None
    assert distinct_scalars([np.zeros(2), np.zeros(2)]) is None


def test_sst_model_merges_words_in_training_only_without_embedding_dropout() -> None:
    train, _, _ = calculator_splits(40, max_depth=4, seed=3)
    vocab = Vocabulary.from_trees(train)
    dropped = TreeLSTMClassifier(vocab, 10, 4, 5, dropout=0.3)
    kept = TreeLSTMClassifier(vocab, 10, 4, 5, dropout=0.3, embedding_dropout=0.0)
    assert dropped.collate(train).plan.num_merged == 0  # training mode: the words' dropout
    assert kept.collate(train).plan.num_merged > 0
    dropped.eval()
    assert dropped.collate(train).plan.num_merged > 0
