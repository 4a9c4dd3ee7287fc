"""A kept plan run again without gradients (``executor/replay.py``): the same outputs as a fresh
run, nothing returned shares memory with the reused buffers, threads get replays of their own,
and gradients, large plans and pickled plans never see one."""

from __future__ import annotations

import gc
import pickle
import threading
import weakref
from typing import Any

import torch

import foldexp.blocks as fb
from foldexp import Compiler
from foldexp.executor import replay
from foldexp.executor.run import execute
from foldexp.models.tree_lstm import random_tree, tree_lstm_classifier


def _trees(rng, n: int) -> list:
    return [random_tree(int(k), 50, rng) for k in rng.integers(1, 20, size=n)]


def _pool(plan) -> list:
    """The plan's replays outside inference mode."""
    return plan.reuse.get("pools", {}).get(False, [])


def _model() -> Compiler:
    torch.manual_seed(0)
    return Compiler(tree_lstm_classifier(50, 8, 8, 5), cache_traces=True)


def _replayed(rng, n: int) -> tuple[Compiler, list, Any]:
    """A model, a batch and its plan, run twice without gradients: a replay is in its pool."""
    model = _model()
    trees = _trees(rng, n)
    plan = model.build(trees)
    with torch.no_grad():
        model.run(plan), model.run(plan)
    assert _pool(plan)
    return model, trees, plan


def test_runs_again_give_what_a_fresh_run_gives(rng) -> None:
    model = _model()
    trees = _trees(rng, 5)
    plan = model.build(trees)
    with torch.no_grad():
        fresh = model.run(plan)  # the first run is fresh
        assert not _pool(plan)
        again = [model.run(plan) for _ in range(3)]
        pool = _pool(plan)
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
    assert len(_pool(plan)) == 1  # one replay, made on the second served run


def test_changed_parameters_are_read_at_every_run(rng) -> None:
    model, trees, plan = _replayed(rng, 3)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(0.5)
        served = model.run(plan)
        fresh = Compiler(model.root).run(model.build(trees))  # the same modules, a new plan
    torch.testing.assert_close(served, fresh, rtol=0, atol=0)


def test_gradients_run_fresh_and_agree(rng) -> None:
    model, _, plan = _replayed(rng, 3)
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
    assert plan.reuse.get("too_large") and not _pool(plan)
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
    assert 1 <= len(_pool(plan)) <= 4


def test_a_pickled_plan_carries_no_replay(rng) -> None:
    model, _, plan = _replayed(rng, 3)
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


def _doubled(xs: list[list[float]]) -> tuple[Compiler, object]:
    model = Compiler(
        fb.Map(fb.Scalar() >> fb.Function(lambda x: x.unsqueeze(-1) * 2.0)) >> fb.Sum()
    )
    return model, model.build(xs)


def test_an_op_changing_its_arguments_in_place_changes_no_later_run() -> None:
    # The constants are the op's arguments here (a free view of their rows): a replay copies
    # them in again at every run, as a fresh run does.
    block = fb.Map(fb.Scalar() >> fb.Function(lambda x: x.mul_(2.0).unsqueeze(-1))) >> fb.Sum()
    model = Compiler(block)
    plan = model.build([[1.0, 2.0], [3.0]])
    with torch.no_grad():
        for _ in range(4):
            torch.testing.assert_close(model.run(plan), torch.tensor([[6.0], [6.0]]))


def test_inference_mode_and_no_grad_keep_replays_apart() -> None:
    model, plan = _doubled([[1.0, 2.0], [3.0]])
    for mode in (torch.inference_mode, torch.inference_mode, torch.no_grad, torch.no_grad):
        with mode():
            torch.testing.assert_close(model.run(plan), torch.tensor([[6.0], [6.0]]))
    assert set(plan.reuse["pools"]) == {True, False}  # type: ignore[attr-defined]


def test_an_output_with_a_leading_unit_dimension_is_written_as_before() -> None:
    # Slice assignment takes (1, n) into n rows; a replay's copy falls back to it.
    double = fb.Function(lambda x: (x * 2.0).unsqueeze(0), output_type=fb.TensorType(()))
    model = Compiler(fb.Map(fb.Scalar() >> double) >> fb.Sum())
    plan = model.build([[1.0, 2.0], [3.0]])
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(model.run(plan), torch.tensor([6.0, 6.0]))


def test_a_dropped_plan_frees_its_replays_without_the_cycle_collector() -> None:
    model, plan = _doubled([[1.0, 2.0], [3.0]])
    with torch.no_grad():
        model.run(plan), model.run(plan), model.run(plan)
    assert _pool(plan)
    buf = weakref.ref(_pool(plan)[0].bufs[0])
    gc.disable()
    try:
        del plan
        assert buf() is None
    finally:
        gc.enable()


def test_a_kept_plan_does_not_keep_the_model_alive() -> None:
    lin = torch.nn.Linear(1, 1)
    model = Compiler(
        fb.Map(fb.Scalar() >> fb.Function(lambda x: x.unsqueeze(-1)) >> lin) >> fb.Sum()
    )
    plan = model.build([[1.0, 2.0]])
    with torch.no_grad():
        model.run(plan), model.run(plan)
    alive = weakref.ref(lin)
    del model, lin
    gc.collect()
    assert alive() is None and _pool(plan)


def test_a_copied_compiler_starts_without_the_originals_fusions() -> None:
    # The executor's per-op state (the pointwise fusion, bound to the original's modules) is
    # never copied: the copy makes its own on its first call.
    import copy

    class Cell(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(1, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.sigmoid(self.lin(x.unsqueeze(-1))) * 2.0 + 1.0

    model = Compiler(fb.Map(fb.Scalar() >> fb.Function(Cell())) >> fb.Sum())
    with torch.no_grad():
        expected = model([[1.0, 2.0]])
    assert any(op.runtime for op in model.ops)
    twin = copy.deepcopy(model)
    assert not any(op.runtime for op in twin.ops)
    with torch.no_grad():
        torch.testing.assert_close(twin([[1.0, 2.0]]), expected)


def test_a_forward_hook_keeping_arguments_sees_them_unchanged(rng) -> None:
    # Feature extraction: a hook keeps the cell's inputs of each run. A replay would rewrite
    # them at the next run; while a hook is registered the plan runs fresh.
    model, trees, plan = _replayed(rng, 3)
    cell = next(m for m in model.modules() if type(m).__name__ == "BinaryTreeLSTMCell")
    kept: list = []
    handle = cell.register_forward_hook(lambda mod, args, out: kept.append(args[0][0]))
    with torch.no_grad():
        model.run(plan)
        first = [t.clone() for t in kept]
        for p in model.parameters():
            p.add_(0.5)  # the next run's cell inputs differ
        model.run(plan)
    assert kept[: len(first)] and not any(
        torch.equal(a, b) for a, b in zip(first, kept[len(first) :])
    )
    for before, now in zip(first, kept):
        torch.testing.assert_close(now, before, rtol=0, atol=0)
    handle.remove()
    taken = len(_pool(plan))
    with torch.no_grad():
        torch.nn.modules.module.register_module_forward_pre_hook(lambda mod, args: None).remove()
        model.run(plan)
    assert len(_pool(plan)) == taken  # replayed again once the hooks are gone (taken, given back)


def test_a_global_forward_hook_runs_the_plan_fresh(rng, monkeypatch) -> None:
    model, trees, plan = _replayed(rng, 2)
    calls: list = []
    real = replay.Replay.run
    monkeypatch.setattr(replay.Replay, "run", lambda *a: calls.append(a) or real(*a))
    handle = torch.nn.modules.module.register_module_forward_hook(lambda mod, args, out: None)
    try:
        with torch.no_grad():
            model.run(plan)
    finally:
        handle.remove()
    assert not calls
    with torch.no_grad():
        model.run(plan)
    assert calls


def test_a_hook_on_a_module_a_plain_function_calls_runs_the_plan_fresh() -> None:
    # ``Function(lambda x: frozen(x))``: the op holds no module, but the hook on the frozen one
    # it calls keeps that module's arguments all the same.
    torch.manual_seed(0)
    emb = torch.nn.Embedding(4, 8)
    frozen = torch.nn.Linear(8, 8).requires_grad_(False)
    model = Compiler(
        fb.Map(fb.Scalar("int64") >> fb.Function(emb))
        >> fb.Sum()
        >> fb.Function(lambda x: frozen(x))
        >> fb.Function(torch.nn.Linear(8, 2))
    )
    words = [[1, 2, 3], [0, 1]]
    plan = model.build(words)
    kept: list = []
    frozen.register_forward_hook(lambda mod, args, out: kept.append(args[0]))
    with torch.no_grad():
        for _ in range(3):
            model.run(plan)
        first = [t.clone() for t in kept]
        emb.weight.add_(1.0)
        model.run(plan)
    assert not _pool(plan)
    for before, now in zip(first, kept):
        torch.testing.assert_close(now, before, rtol=0, atol=0)


def test_a_hook_on_a_child_swapped_in_past_the_registration_hook_is_seen(rng) -> None:
    model, trees, plan = _replayed(rng, 2)
    cell = next(m for m in model.modules() if type(m).__name__ == "BinaryTreeLSTMCell")
    gates = torch.nn.Linear(cell.gates.in_features, cell.gates.out_features)
    gates.register_forward_hook(lambda mod, args, out: None)
    taken = len(_pool(plan))
    cell._modules["gates"] = gates  # as quantization's convert swaps layers: no hook is called
    assert any(op.has_forward_hooks() for op in model.ops)
    with torch.no_grad():
        model.run(plan)
    assert len(_pool(plan)) == taken


def test_a_fused_op_has_the_hooks_of_its_parts() -> None:
    from foldexp.blocks._fusion import FusedOp

    first, second = torch.nn.Linear(4, 4), torch.nn.Linear(4, 2)
    model = Compiler(fb.Function(first) >> fb.Function(second), input_type=fb.TensorType((4,)))
    fused = [op for op in model.ops if isinstance(op, FusedOp)]
    assert fused and not fused[0].has_forward_hooks()
    handle = second.register_forward_pre_hook(lambda mod, args: None)
    assert fused[0].has_forward_hooks()
    handle.remove()
    assert not fused[0].has_forward_hooks()
