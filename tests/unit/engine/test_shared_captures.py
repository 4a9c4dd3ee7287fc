"""Captures shared by ops of one structure (``executor/shared_captures.py``).

A second model of the same cells runs the first one's graphs with its own parameters: no new
trace, the same step as its per-group route. What the structure key cannot tell apart (a
changed global) is caught by the eager check; what it cannot describe is captured per op.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Iterator

import pytest
import torch
from tape_steps import count_calls, step  # beside this file (pytest puts its folder on the path)
from torch import nn

import foldexp.blocks as fb
from foldexp import Compiler
from foldexp.executor import capture, graphs, set_compile_mode, shared_captures

INPUTS = [[[1.0, 2.0, 3.0]] * 2, [[0.0, 1.0, 0.0]] * 3, [[0.5, 0.5, -1.0]] * 4]
SCALE = 2.0  # read by ``_scaled`` at each call: changed by a test


def _scaled(x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x * SCALE)


@pytest.fixture
def traces(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Counts the tracer's runs; the kept captures are forgotten before and after the test."""
    old = capture._mode
    shared_captures.clear()
    yield count_calls(monkeypatch, graphs, "trace_graphs")
    shared_captures.clear()
    set_compile_mode(old)


def _model(cell: nn.Module) -> Compiler:
    return Compiler(fb.Map(fb.Vector(3) >> fb.Function(cell)) >> fb.Sum())


def _same_step_on_the_tape(model: Compiler) -> None:
    want_loss, want = step(model, INPUTS, "off")
    got_loss, got = step(model, INPUTS, "graphs")
    assert got_loss == pytest.approx(want_loss, rel=1e-6)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)


def test_a_second_model_of_the_same_cells_runs_the_first_ones_graphs(
    traces: list[int], caplog: pytest.LogCaptureFixture
) -> None:
    torch.manual_seed(0)
    first = _model(nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)))
    _same_step_on_the_tape(first)
    made = traces[0]
    assert made > 0
    torch.manual_seed(1)  # other weights: the graphs take them as inputs
    second = _model(nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)))
    with caplog.at_level(logging.INFO, logger="foldexp.executor.capture"):
        _same_step_on_the_tape(second)
    assert traces[0] == made
    assert capture.refusal(second.ops[0]) is None
    said = [r.getMessage() for r in caplog.records if "captured in" in r.getMessage()]
    every_one = (
        r"device.compile=graphs: (\d+) op\(s\) captured in \d+\.\d s"
        r" \(\1 of them another op's, of the same structure\)"
    )
    assert len(said) == 1 and re.fullmatch(every_one, said[0]), said


@pytest.mark.parametrize(
    "other",
    [
        lambda: nn.Sequential(nn.Linear(3, 4), nn.LeakyReLU(0.3), nn.Linear(4, 2)),  # a value
        lambda: nn.Sequential(nn.Linear(3, 4), nn.Sigmoid(), nn.Linear(4, 2)),  # a class
        lambda: nn.Sequential(nn.Linear(3, 4), nn.LeakyReLU(0.1), nn.Linear(4, 3)),  # a shape
    ],
)
def test_cells_that_differ_in_a_value_class_or_shape_have_their_own_graphs(
    traces: list[int], other
) -> None:
    torch.manual_seed(0)
    first = _model(nn.Sequential(nn.Linear(3, 4), nn.LeakyReLU(0.1), nn.Linear(4, 2)))
    second = _model(other())
    keys = [
        shared_captures.structure_key(m.ops[0], list(m.ops[0].parameters()))
        for m in (first, second)
    ]
    assert None not in keys and keys[0] != keys[1]
    _same_step_on_the_tape(first)
    made = traces[0]
    _same_step_on_the_tape(second)
    assert traces[0] > made


class _Shifted(nn.Module):
    """Holds a tensor that is no parameter: a constant the graphs would keep by value."""

    def __init__(self, shift: float) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 2)
        self.shift = torch.full((2,), shift)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x) + self.shift


def test_a_cell_holding_a_constant_tensor_is_captured_on_its_own(traces: list[int]) -> None:
    _same_step_on_the_tape(_model(_Shifted(1.0)))
    made = traces[0]
    _same_step_on_the_tape(_model(_Shifted(5.0)))
    assert traces[0] > made


def test_a_users_own_code_has_no_key_and_a_changed_global_is_captured_afresh(
    traces: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No key can see the global ``_scaled`` reads (nor a class attribute, nor a slot): an op
    running a user's function or class is captured on its own."""
    first = Compiler(fb.Map(fb.Vector(3) >> fb.FC(2) >> fb.Function(_scaled)) >> fb.Sum())
    fused = next(op for op in first.ops if op.name == "FC >> _scaled")
    assert shared_captures.structure_key(fused, list(fused.parameters())) is None
    assert shared_captures.structure_key(_model(_Shifted(1.0)).ops[0], []) is None
    _same_step_on_the_tape(first)
    made = traces[0]
    monkeypatch.setattr(sys.modules[__name__], "SCALE", 3.0)
    second = Compiler(fb.Map(fb.Vector(3) >> fb.FC(2) >> fb.Function(_scaled)) >> fb.Sum())
    _same_step_on_the_tape(second)
    assert traces[0] > made


def test_a_twin_that_fails_the_eager_check_is_not_used(
    traces: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two ops given one key (as if it missed what tells them apart): the second's own eager
    check refuses the first's graphs, and it is captured afresh."""
    monkeypatch.setattr(shared_captures, "structure_key", lambda op, params: ("one key",))
    _same_step_on_the_tape(_model(nn.Sequential(nn.Linear(3, 4), nn.LeakyReLU(0.1))))
    made = traces[0]
    _same_step_on_the_tape(_model(nn.Sequential(nn.Linear(3, 4), nn.LeakyReLU(-2.0))))
    assert traces[0] > made


def test_keys_tell_minus_zero_from_zero_and_describe_slices() -> None:
    def key(module: nn.Module) -> tuple | None:
        op = _model(module).ops[0]
        return shared_captures.structure_key(op, list(op.parameters()))

    assert key(nn.LeakyReLU(-0.0)) != key(nn.LeakyReLU(0.0))
    picks = []
    for stop in (2, 2, 3):
        linear = nn.Linear(3, 2)
        linear.pick = slice(0, stop)  # unhashable before Python 3.12: described by its parts
        picks.append(key(linear))
    assert None not in picks and picks[0] == picks[1] != picks[2]
    with_tensor = nn.Linear(3, 2)
    with_tensor.shift = torch.ones(2)  # no parameter: the graphs would keep its values
    assert key(with_tensor) is None


def test_random_ops_and_hooked_modules_have_no_key() -> None:
    dropout = _model(nn.Sequential(nn.Linear(3, 2), nn.Dropout(0.5)))
    assert shared_captures.structure_key(dropout.ops[0], list(dropout.parameters())) is None
    hooked = nn.Linear(3, 2)
    hooked.register_forward_hook(lambda *a: None)
    model = _model(hooked)
    assert shared_captures.structure_key(model.ops[0], list(model.parameters())) is None
    plain = _model(nn.Linear(3, 2))
    assert shared_captures.structure_key(plain.ops[0], list(plain.parameters())) is not None


def test_the_kept_structures_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    shared_captures.clear()
    monkeypatch.setattr(shared_captures, "MAX_KEPT", 2)
    for k in range(3):
        shared_captures.keep(("structure", k), object())
    assert shared_captures.kept(("structure", 0)) == []
    assert len(shared_captures.kept(("structure", 2))) == 1
    for k in range(shared_captures.MAX_TWINS + 2):
        shared_captures.keep(("structure", 2), k)
    assert shared_captures.kept(("structure", 2)) == list(range(2, shared_captures.MAX_TWINS + 2))
    shared_captures.clear()
