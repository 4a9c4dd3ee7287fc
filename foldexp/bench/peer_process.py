"""One peer's worker process (``peer_worker.py``) and the line protocol the peers bench speaks
with it: commands on its stdin, one JSON reply per line on a pipe of its own, every reply read
under a timeout, and whatever goes wrong turned into a note instead of an error.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
from pathlib import Path
from typing import Any

__all__ = ["MAX_REPLY_BYTES", "WORKER", "PeerProcess", "ReplyPipe", "child_env", "clip"]

WORKER = Path(__file__).with_name("peer_worker.py")

#: The longest reply line accepted; anything longer is a misbehaving peer, not a measurement.
MAX_REPLY_BYTES = 1 << 20


class ReplyPipe:
    """Lines from the peer's own reply pipe, each read under a deadline.

    The pipe is not the peer's stdout: libraries print notices on import (DGL does), and such
    text must end up in the peer's log, never in the channel the bench parses.
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._buf = b""

    def readline(self, timeout: float) -> tuple[str | None, str]:
        """``(line, "")``, or ``(None, why)`` with ``why`` one of timeout, eof, too long."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            if len(self._buf) > MAX_REPLY_BYTES:
                return None, "too long"
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                return None, "timeout"
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                return None, "eof"
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line.decode("utf-8", errors="replace"), ""

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class PeerProcess:
    """One worker process and its line protocol, with a timeout on every reply.

    Commands go to the worker's stdin; replies come back on a pipe of their own (its write end
    passed to the child as ``--reply-fd``); the worker's stdout and stderr both go to ``log``.
    Whatever goes wrong -- a crash, a hang, garbage on the reply pipe -- ``read`` returns
    ``None`` with the reason in ``note``, and the bench turns it into a row.
    """

    def __init__(self, name: str, params: dict[str, Any], python: str, env: dict[str, str],
                 log: Path, timeout: float) -> None:  # fmt: skip
        self.name, self.timeout = name, timeout
        self.log = log
        self._log = log.open("w")
        read_fd, write_fd = os.pipe()
        try:
            self.proc = subprocess.Popen(
                [python, str(WORKER), name, json.dumps(params), "--reply-fd", str(write_fd)],
                stdin=subprocess.PIPE,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                pass_fds=(write_fd,),
                text=True,
                env=env,
            )
        except BaseException:
            os.close(read_fd)
            self._log.close()
            raise
        finally:
            os.close(write_fd)  # the child holds its copy; ours would hide its exit (no EOF)
        self.replies = ReplyPipe(read_fd)
        self.meta: dict[str, Any] = {}
        self.note = ""

    def read(self) -> dict[str, Any] | None:
        """The next reply as a JSON object, or ``None`` (and ``note`` says why)."""
        line, why = self.replies.readline(self.timeout)
        if line is None:
            self.note = self._failure(why)
            return None
        try:
            reply = json.loads(line)
        except json.JSONDecodeError as exc:
            reply, bad = None, f"{exc.msg} at column {exc.colno}"
        else:
            bad = "" if isinstance(reply, dict) else f"a {type(reply).__name__}"
        if bad:
            self.proc.kill()  # a peer that garbles one reply cannot be trusted with the next
            self.note = (
                f"failed: malformed reply {clip(line)} ({bad}; expected one JSON object per "
                f"line); log {self.log}"
            )
            return None
        return reply

    def _failure(self, why: str) -> str:
        if why == "timeout":
            self.proc.kill()
            return f"failed: no reply within {self.timeout:g} s (killed); log {self.log}"
        if why == "too long":
            self.proc.kill()
            return f"failed: a reply line over {MAX_REPLY_BYTES} bytes (killed); log {self.log}"
        try:  # the pipe closed: the process ended or is ending
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        tail = self.log.read_text(errors="replace").strip().splitlines()[-3:]
        said = " | ".join(line.strip() for line in tail) or "nothing in its log"
        return f"failed: exited with code {code} without replying: {clip(said, 300)}"

    def send(self, cmd: str) -> bool:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(cmd + "\n")
            self.proc.stdin.flush()
            return True
        except (BrokenPipeError, OSError):
            self.note = self.note or "failed: the process ended"
            return False

    def close(self) -> None:
        if self.proc.poll() is None:
            self.send("quit")
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for f in (self.proc.stdin, self._log):
            if f is not None and not f.closed:
                try:
                    f.close()
                except OSError:  # a pipe whose reader is gone
                    pass
        self.replies.close()


def clip(text: str, limit: int = 80) -> str:
    """``text``'s repr, cut after ``limit`` characters (a reply quoted in a note)."""
    return repr(text if len(text) <= limit else text[:limit] + "...")


def child_env(threads: int) -> dict[str, str]:
    """The environment of a worker: this checkout first on ``PYTHONPATH`` and ``threads``
    threads for OpenMP, MKL and OpenBLAS."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])  # the checkout holding the foldexp package
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[var] = str(max(1, threads))
    return env
