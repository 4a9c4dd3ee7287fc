"""Logging (``foldexp/logs.py``): a command's handlers never outlive it or the stream they
write to, so a run in-process (a test, a notebook) leaves no "Logging error" behind."""

from __future__ import annotations

import io
import logging
import sys
from pathlib import Path

import pytest

from foldexp.cli import main
from foldexp.logs import ConsoleHandler, command_logging


def test_the_console_handler_writes_to_the_stream_of_the_moment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    handler = ConsoleHandler("stdout")
    first, second = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdout", first)
    handler.emit(logging.makeLogRecord({"msg": "one"}))
    first.close()  # as pytest closes a test's captured output
    monkeypatch.setattr(sys, "stdout", second)
    handler.emit(logging.makeLogRecord({"msg": "two"}))
    assert second.getvalue() == "two\n"
    with pytest.raises(ValueError, match="stdout or stderr"):
        ConsoleHandler("stdlog")


def test_a_command_takes_off_and_closes_the_handlers_it_added(tmp_path: Path) -> None:
    root = logging.getLogger()
    before, level = list(root.handlers), root.level
    added = logging.FileHandler(tmp_path / "run.log")
    with command_logging():
        root.addHandler(added)
        root.setLevel(logging.DEBUG)
    assert root.handlers == before and root.level == level
    assert added.stream is None  # the log file is released


def test_a_train_command_in_process_leaves_no_handler_behind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = logging.getLogger()
    before = list(root.handlers)
    args = ["dataset.n=40", "trainer.epochs=1", "trainer.progress=false", "trainer.plots=false"]
    assert main(["train", *args, f"hydra.run.dir={tmp_path}"]) == 0
    assert root.handlers == before
    assert "dataset calculator" in capsys.readouterr().out  # the command did log, to stdout
    assert "dataset calculator" in next(tmp_path.glob("*.log")).read_text()  # and to its file
