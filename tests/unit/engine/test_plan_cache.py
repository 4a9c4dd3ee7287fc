"""The plan cache (``compiler/cache.py``): a batch that comes back whole skips trace and schedule,
with the same outputs and gradients, and nothing else is ever served from it."""

from __future__ import annotations

import torch

import foldexp.blocks as fb
from foldexp import Compiler
from foldexp.models.tree_lstm import random_tree, tree_lstm_classifier
from foldexp.testing import assert_compilers_agree


def _trees(rng, n: int) -> list:
    return [random_tree(int(k), 50, rng) for k in rng.integers(1, 20, size=n)]


def test_a_batch_built_twice_is_served_from_then_on(rng) -> None:
    block = tree_lstm_classifier(50, 8, 8, 5)
    plain, cached = Compiler(block), Compiler(block, cache_traces=True)
    trees = _trees(rng, 6)
    for _ in range(4):
        assert_compilers_agree(plain, cached, trees)
    assert cached.plan_cache is not None
    assert len(cached.plan_cache) == 1 and cached.plan_cache.hits == 2
    assert cached.last_stats["trace"] == 0.0


def test_other_orders_and_subsets_are_not_hits(rng) -> None:
    block = tree_lstm_classifier(50, 8, 8, 5)
    plain, cached = Compiler(block), Compiler(block, cache_traces=True)
    trees = _trees(rng, 6)
    for batch in (trees, trees, trees[::-1], trees[:5], trees[1:], trees):
        assert_compilers_agree(plain, cached, batch)
    assert cached.plan_cache.hits == 1  # type: ignore[union-attr]


def test_shuffled_batches_are_never_kept(rng) -> None:
    cached = Compiler(tree_lstm_classifier(50, 8, 8, 5), cache_traces=True)
    trees = _trees(rng, 40)
    for _ in range(5):
        order = rng.permutation(len(trees))
        for k in range(0, len(trees), 8):
            cached([trees[i] for i in order[k : k + 8]])
    assert len(cached.plan_cache) == 0  # type: ignore[arg-type]


def test_dropout_switched_on_or_off_is_a_different_plan() -> None:
    # In eval mode equal invocations merge; in training mode a dropout op must not be merged,
    # and running a merged plan with dropout on would raise.
    drop = torch.nn.Dropout(0.5)
    block = fb.Map(fb.Scalar() >> fb.Function(lambda x: x.unsqueeze(-1).expand(-1, 4)))
    block = block >> fb.Map(fb.Function(drop)) >> fb.Reduce(fb.Function(torch.add))
    model = Compiler(block, cache_traces=True)
    xs = [[1.0, 1.0, 1.0], [2.0, 2.0]]
    drop.eval()
    for _ in range(3):
        torch.testing.assert_close(model(xs), torch.tensor([[3.0] * 4, [4.0] * 4]))
    drop.train()
    for _ in range(3):
        out = model(xs)  # would raise on the cached eval plan (it merged the dropout's calls)
        assert out.shape == (2, 4)
    assert model.plan_cache.hits == 2  # type: ignore[union-attr]


def test_at_most_size_plans_least_recently_used_dropped(rng) -> None:
    cached = Compiler(tree_lstm_classifier(50, 8, 8, 5), cache_traces=True)
    cached.plan_cache.size = 2  # type: ignore[union-attr]
    batches = [_trees(rng, 3) for _ in range(3)]
    for b in batches:
        cached(b), cached(b)  # seen twice: kept
    assert len(cached.plan_cache) == 2  # type: ignore[arg-type]
    cached(batches[0])  # dropped: built again (a miss), and kept again
    assert cached.plan_cache.hits == 0  # type: ignore[union-attr]
    cached(batches[2])
    assert cached.plan_cache.hits == 1  # type: ignore[union-attr]


def test_plans_kept_or_not_apart_from_traces(rng) -> None:
    block = tree_lstm_classifier(50, 8, 8, 5)
    plain = Compiler(block)
    traces_only = Compiler(block, cache_traces=True, cache_plans=False)
    plans_only = Compiler(block, cache_plans=True)
    assert traces_only.plan_cache is None and plans_only.trace_cache is None
    trees = _trees(rng, 5)
    for _ in range(3):
        assert_compilers_agree(plain, traces_only, trees)
        assert_compilers_agree(plain, plans_only, trees)
    assert plans_only.plan_cache.hits == 1  # type: ignore[union-attr]


def test_kept_plans_copy_and_pickle_as_an_empty_cache(rng) -> None:
    import copy
    import pickle

    model = Compiler(tree_lstm_classifier(50, 8, 8, 5), cache_traces=True)
    trees = _trees(rng, 4)
    model(trees), model(trees)
    assert len(model.plan_cache) == 1  # type: ignore[arg-type]
    clone = copy.deepcopy(model)  # as a model average or a teacher copy would
    assert len(clone.plan_cache) == 0  # starts empty, with a lock of its own
    torch.testing.assert_close(clone(trees), model(trees))
    cache = pickle.loads(pickle.dumps(model.plan_cache))
    assert len(cache) == 0 and cache.size == model.plan_cache.size  # type: ignore[union-attr]


def test_threads_building_with_one_compiler_get_the_right_plans(rng) -> None:
    from concurrent.futures import ThreadPoolExecutor

    block = tree_lstm_classifier(50, 8, 8, 5)
    shared, fresh = Compiler(block, cache_traces=True), Compiler(block)
    trees = _trees(rng, 24)
    batches = [trees[k : k + 6] for k in range(0, 24, 3)] * 3  # each batch comes back
    with torch.no_grad(), ThreadPoolExecutor(4) as pool:
        list(pool.map(shared.build, batches))  # traces and plans kept from 4 threads at once
        for b in batches:
            torch.testing.assert_close(shared(b), fresh(b))


def test_a_served_plan_is_a_copy_sharing_groups_and_replays(rng) -> None:
    cached = Compiler(tree_lstm_classifier(50, 8, 8, 5), cache_traces=True)
    trees = _trees(rng, 3)
    cached.build(trees), cached.build(trees)
    a, b = cached.build(trees), cached.build(trees)
    assert a is not b and a.groups is b.groups and a.reuse is b.reuse
    a.trace_seconds = 1.0  # type: ignore[attr-defined]
    assert b.trace_seconds == 0.0  # type: ignore[attr-defined]
    assert (a.num_nodes, a.num_merged, a.merged_ops) == (b.num_nodes, b.num_merged, b.merged_ops)
