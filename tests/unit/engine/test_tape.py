"""The tape (``device.compile=graphs``): one autograd node per step, each op captured once.

Every case compares the tape with the per-group route (``off``): the same loss and gradients;
and what the tape cannot capture runs on the per-group route inside the same sweep, named.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator

import numpy as np
import pytest
import torch
from tape_steps import count_calls
from tape_steps import step as _step  # beside this file (pytest puts its folder on the path)
from torch import nn

import foldexp.blocks as fb
from foldexp import Compiler
from foldexp.executor import capture, compile_mode, run, set_compile_mode, shared_captures, tape
from foldexp.models.cells import BinaryTreeLSTMCell, TreeLSTMLeaf
from foldexp.models.tree_lstm import binary_tree, random_tree, tree_lstm_classifier, word_leaf


@pytest.fixture
def mode() -> Iterator[None]:
    old = capture._mode
    yield
    set_compile_mode(old)


def _same_step(model: Compiler, inputs: list, atol: float = 1e-6) -> None:
    want_loss, want = _step(model, inputs, "off")
    got_loss, got = _step(model, inputs, "graphs")
    assert got_loss == pytest.approx(want_loss, rel=1e-6, abs=1e-6)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=atol)


def _engine_entries(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the per-group route's calls into autograd's engine (the step's own
    ``loss.backward()`` is one more)."""
    return count_calls(monkeypatch, run, "_group_grads")


def test_tree_lstm_step_equals_the_per_group_route_with_one_engine_entry(
    mode: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(0)
    trees = [random_tree(int(rng.integers(1, 30)), 40, rng) for _ in range(12)]
    torch.manual_seed(0)
    model = Compiler(tree_lstm_classifier(40, 6, 8, 3))
    calls = _engine_entries(monkeypatch)
    _step(model, trees, "off")
    per_group = calls[0]
    assert per_group > 5
    calls[0] = 0
    _same_step(model, trees)
    assert calls[0] == per_group  # the "off" step inside _same_step
    calls[0] = 0
    _step(model, trees, "graphs")
    assert calls[0] == 0, "a group left the tape"
    assert all(capture.refusal(op) is None for op in model.ops)


class _PlainCell(nn.Module):
    """A user's binary Tree-LSTM cell in plain torch ops (no foldexp kernel)."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.gates = nn.Linear(2 * hidden, 5 * hidden)

    def forward(self, left, right):
        (hl, cl), (hr, cr) = left, right
        i, fl, fr, o, u = self.gates(torch.cat([hl, hr], 1)).chunk(5, 1)
        c = i.sigmoid() * u.tanh() + fl.sigmoid() * cl + fr.sigmoid() * cr
        return o.sigmoid() * c.tanh(), c


def test_a_users_plain_cell_and_a_fused_leaf_are_captured(mode: None) -> None:
    rng = np.random.default_rng(1)
    torch.manual_seed(1)
    hidden = 8
    leaf = word_leaf(nn.Embedding(30, 5), TreeLSTMLeaf(5, hidden))
    model = Compiler(binary_tree(leaf, _PlainCell(hidden)) >> fb.GetItem(0) >> fb.FC(3))
    trees = [random_tree(int(rng.integers(1, 20)), 30, rng) for _ in range(9)]
    _same_step(model, trees)
    assert [capture.refusal(op) for op in model.ops] == [None] * len(model.ops)


def test_one_row_groups_and_every_row_count_are_right(mode: None) -> None:
    torch.manual_seed(2)
    cell = BinaryTreeLSTMCell(4)
    leaf = fb.GetItem(0) >> fb.Vector(3) >> fb.Function(TreeLSTMLeaf(3, 4))
    model = Compiler(binary_tree(leaf, cell) >> fb.GetItem(0))
    rng = np.random.default_rng(2)

    def tree(n: int):
        return [(rng.normal(size=3).tolist(),) for _ in range(n)]

    def nest(leaves: list):
        return leaves[0] if len(leaves) == 1 else (nest(leaves[: len(leaves) // 2]),
                                                   nest(leaves[len(leaves) // 2 :]))  # fmt: skip

    for sizes in ([1], [2], [3, 1], [5, 2, 7], [1, 1, 1, 9]):
        _same_step(model, [nest(tree(n)) for n in sizes])


def test_dropout_on_the_tape_repeats_with_its_seed(mode: None) -> None:
    set_compile_mode("graphs")
    torch.manual_seed(3)
    net = nn.Sequential(nn.Linear(4, 6), nn.Dropout(0.5), nn.Tanh())
    model = Compiler(fb.Map(fb.Vector(4) >> fb.Function(net)) >> fb.Sum())
    xs = [[[1.0, 2.0, 3.0, 4.0]] * 3, [[0.5, -1.0, 2.0, 0.0]]]

    def draw() -> torch.Tensor:
        torch.manual_seed(7)
        out = model(xs)
        out.sum().backward()
        return out.detach()

    first, second = draw(), draw()
    torch.testing.assert_close(first, second)
    net.eval()
    _same_step(model, xs)


class _Branchy(nn.Module):
    """A body whose arithmetic depends on its row count: the capture's guards see it."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        y = self.lin(x)
        return y * 2 if x.shape[0] > 3 else y - 1


def test_a_body_branching_on_its_row_count_is_right_for_every_count(mode: None) -> None:
    torch.manual_seed(4)
    model = Compiler(fb.Map(fb.Vector(3) >> fb.Function(_Branchy())) >> fb.Sum())
    for n in (2, 5, 2, 9, 3):
        _same_step(model, [[[float(i), 1.0, -1.0]] for i in range(n)])


def test_a_count_outside_a_captures_guards_gets_a_capture_of_its_own(
    mode: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch.manual_seed(4)
    model = Compiler(fb.Map(fb.Vector(3) >> fb.Function(_Branchy())) >> fb.Sum())
    calls = _engine_entries(monkeypatch)
    for n in (2, 5, 3, 9):
        _step(model, [[[float(i), 1.0, -1.0]] for i in range(n)], "graphs")
    assert calls[0] == 0, "a group left the tape"
    kept = [caps for op in model.ops for caps in op.runtime.get("captures", {}).values()]
    (caps,) = [caps for caps in kept if len(caps) > 1]  # the branching body's
    assert len(caps) == 2  # one for counts up to 3, one above
    assert {n: ok for cap in caps for n, ok in cap.rows_ok.items() if ok} == {
        2: True, 3: True, 5: True, 9: True,
    }  # fmt: skip


class _Adjacent(nn.Module):
    """A body branching at two adjacent row counts: its trace at 4 rows pins the count to 4."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        y = self.lin(x)
        n = x.shape[0]
        return y * 3 if n > 4 else y * 2 if n > 3 else y


class _ReadsItsCount(nn.Module):
    """A body that reads its row count as a number: every trace of it is for one count."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        return self.lin(x) * float(int(x.shape[0]))


@pytest.mark.parametrize("body", [_Adjacent, _ReadsItsCount])
def test_a_capture_pinned_to_one_count_serves_that_count_alone(mode: None, body) -> None:
    torch.manual_seed(4)
    model = Compiler(fb.Map(fb.Vector(3) >> fb.Function(body())) >> fb.Sum())
    for n in (2, 4, 9, 3, 6, 7, 5, 4, 2):
        _same_step(model, [[[float(i), 1.0, -1.0]] for i in range(n)])


def test_a_gathers_arguments_are_one_block_and_their_gradients_too(
    mode: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The binary cell's four arguments (two children's h and c, one type) are one gathered
    block in the capture; its backward hands back one gradient block for their rows."""
    rng = np.random.default_rng(1)
    torch.manual_seed(1)
    leaf = word_leaf(nn.Embedding(30, 4), TreeLSTMLeaf(4, 4))
    model = Compiler(binary_tree(leaf, _PlainCell(4)) >> fb.GetItem(0))
    trees = [random_tree(int(rng.integers(2, 20)), 30, rng) for _ in range(6)]
    added: list[int] = []
    real = tape.add_rows

    def add_rows(buf, rows, parts):
        added.append(len(parts))
        real(buf, rows, parts)

    monkeypatch.setattr(tape, "add_rows", add_rows)
    _step(model, trees, "graphs")
    assert added and set(added) == {1}  # one gradient block a gather
    (cell,) = [op for op in model.ops if isinstance(op.module, _PlainCell)]
    layouts = [layout for _, layout, _ in cell.runtime["captures"]]
    assert set(layouts) == {((0, 1, 2, 3),)}  # h and c of both children: one gather, one input
    assert all(capture.refusal(op) is None for op in model.ops)


class _DataDependent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        y = self.lin(x)
        return y if bool(y.sum() > 0) else -y


@pytest.mark.parametrize(
    "body, why",
    [
        (_DataDependent, ""),
        (lambda: nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3)), "buffers"),
    ],
)
def test_what_cannot_be_captured_runs_per_group_and_is_named(
    mode: None, body, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    torch.manual_seed(5)
    module = body()
    model = Compiler(fb.Map(fb.Vector(3) >> fb.Function(module)) >> fb.Sum())
    xs = [[[1.0, 2.0, 0.5], [0.0, -1.0, 2.0]], [[3.0, 1.0, 1.0]]]
    module.eval()  # BatchNorm: the same statistics both ways
    with caplog.at_level(logging.INFO, logger="foldexp.executor.capture"):
        _same_step(model, xs)
    reasons = [capture.refusal(op) for op in model.ops]
    assert any(r is not None and why in r for r in reasons), reasons
    assert "runs on the eager route" in caplog.text


def test_a_forward_hook_keeps_the_op_per_group(mode: None) -> None:
    torch.manual_seed(6)
    lin = nn.Linear(3, 2)
    seen: list[int] = []
    lin.register_forward_hook(lambda m, a, o: seen.append(a[0].shape[0]))
    model = Compiler(fb.Map(fb.Vector(3) >> fb.Function(lin)) >> fb.Sum())
    _same_step(model, [[[1.0, 2.0, 3.0]] * 2, [[0.0, 1.0, 0.0]]])
    assert seen, "the hook never ran"
    assert "hook" in (capture.refusal(model.ops[0]) or "")


def test_a_loop_of_computed_length_runs_per_group(mode: None) -> None:
    torch.manual_seed(7)
    step = fb.Function(nn.Linear(2, 2)) >> fb.Function(torch.tanh)
    loop = fb.While(fb.Function(lambda x: x.sum(1) < 1.0), step, max_iterations=5)
    model = Compiler(fb.Vector(2) >> loop)
    _same_step(model, [[0.1, 0.2], [2.0, 3.0], [-1.0, 0.5]])
    reasons = [capture.refusal(op) for op in model.ops]
    assert any("loop of computed length" in (r or "") for r in reasons), reasons


def test_autocast_steps_run_per_group_and_stay_right(mode: None) -> None:
    torch.manual_seed(8)
    lin = nn.Linear(4, 3)
    model = Compiler(fb.Map(fb.Vector(4) >> fb.Function(lin)) >> fb.Sum())
    xs = [[[1.0, 2.0, 3.0, 0.5]] * 2, [[0.0, 1.0, -1.0, 2.0]]]
    grads = []
    for m in ("off", "graphs"):
        set_compile_mode(m)
        lin.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(xs)
        out.float().sum().backward()
        grads.append(lin.weight.grad.clone())
    torch.testing.assert_close(grads[0], grads[1])


def test_a_second_derivative_through_the_tape_is_refused_with_the_way_out(mode: None) -> None:
    set_compile_mode("graphs")
    lin = nn.Linear(3, 1)
    model = Compiler(fb.Map(fb.Vector(3) >> fb.Function(lin)) >> fb.Sum())
    out = model([[[1.0, 2.0, 3.0]]]).pow(2).sum()
    with pytest.raises(RuntimeError, match="device.compile=off"):
        torch.autograd.grad(out, [lin.weight], create_graph=True)


def test_a_model_changed_after_its_capture_is_captured_again(mode: None) -> None:
    torch.manual_seed(11)
    lin = nn.Linear(3, 2)
    model = Compiler(fb.Map(fb.Vector(3) >> fb.Function(lin)) >> fb.Sum())
    xs = [[[1.0, 2.0, 3.0]] * 2, [[0.0, 1.0, 0.0]]]
    _same_step(model, xs)
    lin.bias.requires_grad_(False)
    _same_step(model, xs)
    assert lin.bias.grad is None or not lin.bias.grad.abs().sum()


def test_the_mode_is_checked_and_defaults_by_device(mode: None) -> None:
    with pytest.raises(ValueError, match="device.compile='fast'"):
        set_compile_mode("fast")
    set_compile_mode(None)
    assert compile_mode("cpu") == "off"
    assert compile_mode("cuda") in ("inductor", "graphs")
    set_compile_mode("inductor")
    assert compile_mode("cpu") == "inductor"


def test_a_steps_captures_are_logged_once_with_their_seconds(
    mode: None, caplog: pytest.LogCaptureFixture
) -> None:
    torch.manual_seed(9)
    model = Compiler(fb.Map(fb.Vector(3) >> fb.FC(2)) >> fb.Sum())
    xs = [[[1.0, 2.0, 3.0]] * 2, [[0.0, 1.0, 0.0]] * 3]
    with caplog.at_level(logging.INFO, logger="foldexp.executor.capture"):
        _step(model, xs, "graphs")
        _step(model, xs, "graphs")
    said = [r.getMessage() for r in caplog.records if "captured in" in r.getMessage()]
    assert len(said) == 1
    twins = r"( \(\d+ of them another op's, of the same structure\))?"  # an earlier test's cells
    assert re.fullmatch(
        r"device.compile=graphs: \d+ op\(s\) captured in \d+\.\d s" + twins, said[0]
    )


@pytest.mark.slow
def test_inductor_compiles_the_tapes_graphs_and_the_step_is_unchanged(
    mode: None, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``device.compile=inductor`` (its cache a private folder of the test's): the same loss
    and gradients as the per-group route, every op on the tape."""
    from foldexp.executor import inductor

    (tmp_path / "home").mkdir(mode=0o700)
    monkeypatch.setenv("FOLDEXP_KERNEL_CACHE", str(tmp_path / "home" / "kernels"))
    monkeypatch.setattr(inductor, "_cache_ready", None)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "unused"))
    torch.manual_seed(10)
    cell = nn.Sequential(nn.Linear(3, 4), nn.Dropout(0.5), nn.Tanh())
    model = Compiler(fb.Map(fb.Vector(3) >> fb.Function(cell)) >> fb.Sum())
    xs = [[[1.0, 2.0, 3.0]] * 2, [[0.0, 1.0, 0.0]] * 3, [[0.5, 0.5, -1.0]]]
    torch.manual_seed(1)
    drawn = _step(model, xs, "inductor")  # training: its dropout repeats with the seed
    torch.manual_seed(1)
    assert _step(model, xs, "inductor")[0] == drawn[0]
    assert capture.refusal(model.ops[0]) is None
    cell.eval()
    want_loss, want = _step(model, xs, "off")
    got_loss, got = _step(model, xs, "inductor")
    assert got_loss == pytest.approx(want_loss, rel=1e-5)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
    refused = [capture.refusal(op) for op in model.ops]
    assert refused == [None] * len(refused), refused
    assert (tmp_path / "home" / "inductor").is_dir()
    # A warm start (a fresh process: no op's captures, none kept to share): captured afresh,
    # every graph comes from Inductor's cache, none recompiled.
    from torch._dynamo.utils import counters

    for op in model.ops:
        op.runtime.pop("captures", None)
    shared_captures.clear()
    counters["inductor"].clear()
    assert _step(model, xs, "inductor")[0] == pytest.approx(got_loss, rel=1e-6)
    assert counters["inductor"]["fxgraph_cache_hit"] > 0
    assert counters["inductor"]["fxgraph_cache_miss"] == 0
    assert counters["inductor"]["fxgraph_cache_bypass"] == 0
