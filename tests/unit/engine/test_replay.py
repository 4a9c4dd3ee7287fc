"""A kept plan run again without gradients (``executor/replay.py``): the same outputs as a fresh
run, nothing returned shares memory with the reused buffers, threads get replays of their own,
and gradients, large plans and pickled plans never see one."""

from __future__ import annotations

import pickle
import threading

import torch

import foldexp.blocks as fb
from foldexp import Compiler
from foldexp.executor import replay
from foldexp.executor.run import execute
from foldexp.models.tree_lstm import random_tree, tree_lstm_classifier


def _trees(rng, n: int) -> list:
    return [random_tree(int(k), 50, rng) for k in rng.integers(1, 20, size=n)]


def _model() -> Compiler:
    torch.manual_seed(0)
    return Compiler(tree_lstm_classifier(50, 8, 8, 5), cache_traces=True)


def test_runs_again_give_what_a_fresh_run_gives(rng) -> None:
    model = _model()
    trees = _trees(rng, 5)
    plan = model.build(trees)
    with torch.no_grad():
        fresh = model.run(plan)  # the first run is fresh
        assert plan.reuse.get("pool") is None
        again = [model.run(plan) for _ in range(3)]
        pool = plan.reuse["pool"]
        assert len(pool) == 1
        # Each run is the earlier fresh run's outputs, bitwise, and nothing returned is
        # overwritten by the runs after it.
        for out in again:
            torch.testing.assert_close(out, fresh, rtol=0, atol=0)
        assert all(o.untyped_storage().data_ptr() != b.untyped_storage().data_ptr()
                   for o in again for b in pool[0].bufs)  # fmt: skip


def test_plans_served_from_the_cache_share_their_replays(rng) -> None:
    model = _model()
    trees = _trees(rng, 4)
    with torch.no_grad():
        outs = [model(trees) for _ in range(5)]  # hits from the third call on
    assert model.plan_cache.hits == 3  # type: ignore[union-attr]
    for out in outs[1:]:
        torch.testing.assert_close(out, outs[0], rtol=0, atol=0)
    plan = model.build(trees)
    assert len(plan.reuse["pool"]) == 1  # one replay, made on the second served run


def test_changed_parameters_are_read_at_every_run(rng) -> None:
    model = _model()
    trees = _trees(rng, 3)
    plan = model.build(trees)
    with torch.no_grad():
        model.run(plan), model.run(plan)
        for p in model.parameters():
            p.mul_(0.5)
        served = model.run(plan)
        fresh = Compiler(model.root).run(model.build(trees))  # the same modules, a new plan
    torch.testing.assert_close(served, fresh, rtol=0, atol=0)


def test_gradients_run_fresh_and_agree(rng) -> None:
    model = _model()
    trees = _trees(rng, 3)
    plan = model.build(trees)
    with torch.no_grad():
        model.run(plan), model.run(plan)
    out = model.run(plan)
    assert out.requires_grad
    out.sum().backward()
    assert all(p.grad is not None for p in model.parameters())
    with torch.no_grad():
        torch.testing.assert_close(model.run(plan), out.detach())


def test_a_plan_over_the_size_limit_is_never_kept(rng, monkeypatch) -> None:
    monkeypatch.setattr(replay, "MAX_BYTES", 1000)
    model = _model()
    trees = _trees(rng, 5)
    plan = model.build(trees)
    with torch.no_grad():
        first = [model.run(plan) for _ in range(3)]
    assert plan.reuse.get("too_large") and not plan.reuse.get("pool")
    torch.testing.assert_close(first[2], first[0], rtol=0, atol=0)


def test_threads_running_one_plan_each_get_their_own(rng) -> None:
    model = _model()
    trees = _trees(rng, 6)
    plan = model.build(trees)
    with torch.no_grad():
        expected = model.run(plan)
    results: list[torch.Tensor] = []
    errors: list[BaseException] = []

    def serve() -> None:
        try:
            with torch.no_grad():
                for _ in range(20):
                    results.append(execute(plan, model.ops, [], torch.device("cpu"))[0])
        except BaseException as e:  # noqa: BLE001  (reported below)
            errors.append(e)

    threads = [threading.Thread(target=serve) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(results) == 80
    for r in results:
        torch.testing.assert_close(r, expected, rtol=0, atol=0)
    assert 1 <= len(plan.reuse["pool"]) <= 4


def test_a_pickled_plan_carries_no_replay(rng) -> None:
    model = _model()
    trees = _trees(rng, 3)
    plan = model.build(trees)
    with torch.no_grad():
        model.run(plan), model.run(plan)
    assert plan.reuse["pool"]
    copy = pickle.loads(pickle.dumps(plan))
    assert copy.reuse == {}
    with torch.no_grad():
        torch.testing.assert_close(model.run(copy), model.run(plan), rtol=0, atol=0)


def test_another_op_list_runs_fresh() -> None:
    # The same plan run with other ops (equal in kind, other parameters) reads those ops.
    a = fb.Map(fb.Scalar() >> fb.Function(lambda x: x.unsqueeze(-1) * 2.0)) >> fb.Sum()
    b = fb.Map(fb.Scalar() >> fb.Function(lambda x: x.unsqueeze(-1) * 3.0)) >> fb.Sum()
    ma, mb = Compiler(a), Compiler(b)
    plan = ma.build([[1.0, 2.0]])
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(ma.run(plan), torch.tensor([[6.0]]))
        torch.testing.assert_close(mb.run(plan), torch.tensor([[9.0]]))
        torch.testing.assert_close(ma.run(plan), torch.tensor([[6.0]]))


def test_an_op_returning_a_python_number() -> None:
    block = fb.Map(fb.Scalar() >> fb.Function(lambda x: x * 2.0)) >> fb.Sum()
    block = block >> fb.Function(lambda s: 7.0, output_type=fb.TensorType(()))
    model = Compiler(block)
    plan = model.build([[1.0, 2.0], [3.0]])
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(model.run(plan), torch.tensor([7.0, 7.0]))
