"""Logging as foldexp's commands set it up: handlers that never outlive what they write to.

Library code only gets loggers (``logging.getLogger("foldexp.…")``); the commands configure
where records go. ``foldexp train`` and ``foldexp bench`` do it through Hydra's job logging
(``foldexp/conf/hydra/default.yaml``), whose console handler is ``ConsoleHandler``, and every
command runs inside ``command_logging``.

Why. Hydra's own console handler is a ``StreamHandler`` bound to the ``sys.stdout`` *object* of
the moment it was configured, and it stays on the root logger after the command returns. Run
in-process where that object is replaced and closed (a test's captured output, a notebook
cell), every later record printed "--- Logging error --- ValueError: I/O operation on closed
file" (96 times in one run of the test suite), and the run's log file stayed open, receiving
the next run's records. ``ConsoleHandler`` looks up ``sys.stdout`` / ``sys.stderr`` at each
record; ``command_logging`` takes off, and closes, whatever handlers a command added.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from typing import IO, Any

__all__ = ["ConsoleHandler", "command_logging"]


class ConsoleHandler(logging.StreamHandler):
    """A ``StreamHandler`` writing to ``sys.<stream>`` as it is when each record comes."""

    def __init__(self, stream: str = "stderr") -> None:
        if stream not in ("stdout", "stderr"):
            raise ValueError(f"ConsoleHandler stream={stream!r}; expected stdout or stderr")
        self.stream_name = stream
        super().__init__()

    @property  # type: ignore[override]
    def stream(self) -> IO[str]:
        return getattr(sys, self.stream_name)

    @stream.setter
    def stream(self, value: Any) -> None:
        pass  # the name decides (StreamHandler.__init__ and setStream assign one)


@contextlib.contextmanager
def command_logging() -> Iterator[None]:
    """Runs a command; afterwards the root logger has its handlers and level of before, and
    the handlers the command added are closed (a log file is released)."""
    root = logging.getLogger()
    before, level = list(root.handlers), root.level
    try:
        yield
    finally:
        for handler in root.handlers[:]:
            if handler not in before:
                root.removeHandler(handler)
                handler.close()
        for handler in before:
            if handler not in root.handlers:
                root.addHandler(handler)
        root.setLevel(level)
