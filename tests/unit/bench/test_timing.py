"""``run_interleaved``: warm-up and timed rounds both go round-robin with a rotating start, so
cases compared in a ratio run under the same conditions, the allocator's included."""

from __future__ import annotations

import pytest
import torch

from foldexp.bench import timing
from foldexp.bench.timing import Case, Stopwatch, run_interleaved


def _recording_cases(calls: list[str]) -> list[Case]:
    def make(name: str) -> Case:
        def step(sw: Stopwatch) -> None:
            calls.append(name)
            with sw(name):
                pass

        return Case(name, step)

    return [make(n) for n in "abc"]


def test_warmup_rounds_are_interleaved_like_the_timed_rounds() -> None:
    calls: list[str] = []
    records = run_interleaved(_recording_cases(calls), torch.device("cpu"), warmup=2, repeats=3)
    warm, timed = calls[:6], calls[6:]
    assert warm == ["a", "b", "c", "b", "c", "a"]  # not a, a, b, b, c, c
    assert timed == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert [(r["column"], r["repeat"]) for r in records][:3] == [("a", 0), ("b", 0), ("c", 0)]


def test_budget_stops_repeats_but_not_before_the_minimum() -> None:
    calls: list[str] = []
    run_interleaved(
        _recording_cases(calls), torch.device("cpu"), 0, repeats=50, budget_s=1e-9, min_repeats=2
    )
    assert len(calls) == 2 * 3


def test_machine_names_the_cpu_family(monkeypatch: pytest.MonkeyPatch) -> None:
    # VMs name only the line ("AMD EPYC"); its generations differ in speed and dense route.
    monkeypatch.setattr(timing, "cpu_vendor_family", lambda: ("AuthenticAMD", 25))
    assert "AuthenticAMD family 25" in timing._machine()
    monkeypatch.setattr(timing, "cpu_vendor_family", lambda: ("", 0))
    assert "family" not in timing._machine()
