"""An op whose graphs Inductor cannot compile stays on the tape under ``device.compile=inductor``:
its graphs, traced again as ``graphs`` traces them, run as they are (``executor/graphs.py``),
named once in the log; the step equals that mode's, and no group leaves the tape. A sparse
gradient (a word table's) passes the capture's check against eager and stays sparse."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from tape_steps import step as _step  # beside this file (pytest puts its folder on the path)
from torch import nn

import foldexp.blocks as fb
from foldexp import Compiler
from foldexp.executor import capture, run, set_compile_mode


@pytest.fixture
def private_inductor_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    from foldexp.executor import inductor

    (tmp_path / "home").mkdir(mode=0o700)
    monkeypatch.setenv("FOLDEXP_KERNEL_CACHE", str(tmp_path / "home" / "kernels"))
    monkeypatch.setattr(inductor, "_cache_ready", None)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "unused"))
    old = capture._mode
    yield
    set_compile_mode(old)


def test_a_sparse_word_tables_gradient_is_checked_and_kept_sparse(
    private_inductor_cache: None,
) -> None:
    # The capture's check compares a sparse gradient as the dense one it stands for.
    torch.manual_seed(0)
    words = nn.Embedding(10, 4, sparse=True)
    body = fb.Function(words) >> fb.Function(nn.Linear(4, 3))
    model = Compiler(fb.Map(fb.Scalar("int64") >> body) >> fb.Sum())
    inputs = [[1, 2, 3], [4, 5], [6], [2, 2, 9, 0]]
    want_loss, want = _step(model, inputs, "off")
    got_loss, got = _step(model, inputs, "graphs")
    assert [capture.refusal(op) for op in model.ops] == [None] * len(model.ops)
    assert words.weight.grad.is_sparse
    assert got_loss == pytest.approx(want_loss, rel=1e-6)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_a_sparse_word_table_stays_on_the_tape_uncompiled(
    private_inductor_cache: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Inductor cannot compile a sparse gradient behind dropout (SST's leaf: its word table).
    torch.manual_seed(0)
    words = nn.Embedding(10, 4, sparse=True)
    body = fb.Function(words) >> fb.Function(nn.Dropout(0.5)) >> fb.Function(nn.Linear(4, 3))
    model = Compiler(fb.Map(fb.Scalar("int64") >> body) >> fb.Sum())
    inputs = [[1, 2, 3], [4, 5], [6], [2, 2, 9, 0]]
    torch.manual_seed(1)
    want_loss, want = _step(model, inputs, "graphs")
    entries = [0]
    real = run._group_grads

    def counted(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        entries[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(run, "_group_grads", counted)
    torch.manual_seed(1)
    with caplog.at_level(logging.INFO, logger="foldexp.executor.capture"):
        got_loss, got = _step(model, inputs, "inductor")
    # the graphs ``graphs`` runs, dropout's draws included: the same step
    assert got_loss == pytest.approx(want_loss, rel=1e-6)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
    assert words.weight.grad.is_sparse
    assert [capture.refusal(op) for op in model.ops] == [None] * len(model.ops)
    assert entries[0] == 0  # every group on the tape: no per-group backward
    said = [r.getMessage() for r in caplog.records if "not compiled" in r.getMessage()]
    assert len(said) == 1 and "SparseTensorImpl" in said[0], said
    _step(model, inputs, "inductor")  # a second step: said once, still on the tape
    assert sum("not compiled" in r.getMessage() for r in caplog.records) == 1
    assert entries[0] == 0
