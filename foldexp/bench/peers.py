"""``bench=peers``: the same Tree-LSTM training step in every implementation, side by side.

All peers get the same trees -- written once to ``peers_trees.json`` in the run folder -- the
same sizes (issue 7: hidden 128, embeddings 128, vocabulary 1000, 5 classes, 256 random trees of
64 leaves) and do the same work per step: forward, mean cross-entropy at the roots, backward.

Each peer runs in its own process (``peer_worker.py``): DyNet reads its autobatching mode before
import, and a missing or broken library then costs only its own row ("skipped: ..."). Replies
come back on a pipe of their own, never the peer's stdout (libraries print notices there), and a
peer that crashes, hangs past ``timeout_s`` or garbles a reply becomes a row saying so
("failed: ..."), never an error of the bench.

All processes start first and wait; the bench then asks each in turn for ``steps_per_turn``
steps back to back, round after round (rotating who goes first), so every peer's repeats are
spread over the same stretch of time and share the same background load. Every step is one
timed repeat. Several steps per turn measure what a training loop sees, steps back to back: on these
VMs a multi-threaded step that follows seconds of idling (the other peers' turns) tends to run
slower than one that follows another step. The plain per-tree loop is about 30x slower than
the rest, so it steps over the first ``loop_trees`` trees only (trees/s stays comparable).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from foldexp.bench.cells import Cell, Record
from foldexp.bench.timing import Env
from foldexp.bench.trees import make_trees, trees_digest

__all__ = ["PEERS", "PEER_MODULES", "peer_cells"]

PEERS = {
    "engine": "foldexp engine (trace + schedule + run)",
    "engine_cached": "foldexp engine, per-input traces cached (schedule + run)",
    "engine_agenda": "foldexp engine, DyNet's agenda order instead of depth",
    "engine_unmerged": "foldexp engine, equal invocations not merged (every leaf computed)",
    "engine_plain": "foldexp engine, a user's own cells (plain nn.Linear, no foldexp layer)",
    "engine_mkl": "foldexp engine, dense layers through torch's default MKL matmuls",
    "engine_onednn": "foldexp engine, dense layers through oneDNN",
    "loop": "plain per-tree PyTorch loop",
    "level": "hand-written level-by-level batching (PyTorch)",
    "dynet": "DyNet, autobatch off",
    "dynet_ab1": "DyNet, autobatch 1",
    "dynet_ab2": "DyNet, autobatch 2",
    "torchfold": "torchfold",
    "dgl": "DGL (prop_nodes, graph build included)",
}

WORKER = Path(__file__).with_name("peer_worker.py")

#: Peers whose ``setup`` lives in a file the worker loads by path instead of ``peer_torch``:
#: DyNet's, whose process must never import torch. Also the seam for peers from elsewhere --
#: tests register fake ones: ``PEERS[name] = description; PEER_MODULES[name] = path``.
PEER_MODULES: dict[str, Path] = {
    name: Path(__file__).with_name("peer_dynet.py") for name in ("dynet", "dynet_ab1", "dynet_ab2")
}

#: The longest reply line accepted; anything longer is a misbehaving peer, not a measurement.
MAX_REPLY_BYTES = 1 << 20


class _Replies:
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


class _Peer:
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
        self.replies = _Replies(read_fd)
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
                f"failed: malformed reply {_clip(line)} ({bad}; expected one JSON object per "
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
        return f"failed: exited with code {code} without replying: {_clip(said, 300)}"

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


def _clip(text: str, limit: int = 80) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _python(cfg_python: str) -> str:
    return cfg_python or sys.executable


def _child_env(threads: int) -> dict[str, str]:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])  # the checkout holding the foldexp package
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[var] = str(max(1, threads))
    return env


def peer_cells(bench: Any, env: Env, seed: int, out_dir: Path, device: Any = None) -> list[Cell]:
    """Start, one cell per round (warm-up rounds first), stop. ``device`` (the bench's device
    config) passes ``onednn`` and ``keep_memory`` on to every peer process alike."""
    pc = bench.peers
    for name in pc.implementations:  # fail before anything runs, not halfway through the grid
        if name not in PEERS:
            raise ValueError(f"bench.peers.implementations: unknown {name!r}; one of {list(PEERS)}")
    if pc.steps_per_turn < 1:
        raise ValueError(
            f"bench.peers.steps_per_turn: expected at least 1, got {pc.steps_per_turn}"
        )
    state: dict[str, Any] = {"peers": []}
    base: Record = {
        "experiment": "peers",
        "mode": "training",
        "size": pc.leaves,
        "shape": "random",
        "state_size": pc.hidden,
        "unit": "trees",
    }

    def start() -> list[Record]:
        trees = make_trees(pc.trees, pc.leaves, pc.vocab, seed)
        labels = np.random.default_rng(seed + 1).integers(pc.classes, size=pc.trees).tolist()
        trees_file = out_dir / "peers_trees.json"
        trees_file.write_text(json.dumps({"trees": trees, "labels": labels}))
        state["digest"] = trees_digest(trees)
        logs = out_dir / "peers"
        logs.mkdir(parents=True, exist_ok=True)
        child_env = _child_env(env.threads)
        records: list[Record] = []
        for name in pc.implementations:
            n = min(pc.loop_trees, pc.trees) if name == "loop" and pc.loop_trees > 0 else pc.trees
            params = {
                "trees_file": str(trees_file),
                "count": n,
                "vocab": pc.vocab,
                "embed": pc.embed,
                "hidden": pc.hidden,
                "classes": pc.classes,
                "threads": env.threads,
                "seed": seed,
                "dynet_mem": pc.dynet_mem,
                "keep_memory": bool(getattr(device, "keep_memory", True)),
                "onednn": getattr(device, "onednn", None),
            }
            if name in PEER_MODULES:
                params["module"] = str(PEER_MODULES[name])
            try:
                peer = _Peer(name, params, _python(pc.python), child_env, logs / f"{name}.log",
                             pc.timeout_s)  # fmt: skip
            except OSError as exc:  # e.g. bench.peers.python names no interpreter
                note = f"failed: cannot start {_python(pc.python)}: {exc}"
                records.append(_note_row(base, name, note))
                continue
            peer.count = n  # type: ignore[attr-defined]
            state["peers"].append(peer)
        for peer in list(state["peers"]):  # all start in parallel; collect their replies
            reply = peer.read()
            if reply is not None and reply.get("status") == "ready":
                peer.meta = reply
                continue
            if reply is not None:
                kind = "skipped" if reply.get("status") == "unavailable" else "failed"
                peer.note = _refusal(reply, kind)
            state["peers"].remove(peer)
            peer.close()
            records.append(_note_row(base, peer.name, peer.note))
        return records

    def round_(r: int, warm: bool) -> list[Record]:
        records: list[Record] = []
        live = state["peers"]
        k = r % max(1, len(live))
        turn = pc.steps_per_turn
        for peer in live[k:] + live[:k]:
            reply = peer.read() if peer.send(f"step {turn}") else None
            seconds = _step_seconds(peer, reply, turn)
            if seconds is None:
                live.remove(peer)
                peer.close()
                records.append(_note_row(base, peer.name, peer.note))
                continue
            if warm:
                continue
            for j, sec in enumerate(seconds):  # one per step of the turn
                records.append(
                    {
                        **base,
                        "column": peer.name,
                        "repeat": r * turn + j,
                        "seconds": sec,
                        "batch_size": peer.count,
                        "items": peer.count,
                        "calls": reply.get("calls"),
                        "schedule_s": reply.get("build_s"),
                        "loss": reply.get("loss"),
                        "load": os.getloadavg()[0],
                        "note": f"{peer.meta.get('version', '')}; trees {state['digest']}",
                    }
                )
        return records

    def stop() -> list[Record]:
        for peer in state["peers"]:
            peer.close()
        return []

    cells = [Cell("peers: start processes", start)]
    for w in range(pc.warmup):
        cells.append(Cell(f"peers warm-up {w}", lambda w=w: round_(w, True)))
    for r in range(pc.repeats):
        cells.append(Cell(f"peers round {r}", lambda r=r: round_(r, False)))
    cells.append(Cell("peers: stop processes", stop))
    return cells


def _refusal(reply: dict[str, Any], kind: str) -> str:
    """The note for a peer whose first reply is not ``ready``."""
    reason = reply.get("reason")
    if not isinstance(reason, str) or not reason:
        reason = f"unexpected first reply {_clip(json.dumps(reply))} (expected status 'ready')"
    return f"{kind}: {reason}"


def _step_seconds(peer: _Peer, reply: dict[str, Any] | None, turn: int) -> list[float] | None:
    """The ``turn`` step times of a reply, or ``None`` with ``peer.note`` saying what was wrong.

    The worker's own failure (``{"status": "failed", "reason": ...}``) and a reply that does not
    hold ``turn`` positive, finite times both end the peer with a note instead of a bad row.
    """
    if reply is None:
        return None
    if reply.get("status") == "failed":
        peer.note = _refusal(reply, "failed")
        return None
    seconds = reply.pop("seconds", None)
    ok = isinstance(seconds, list) and len(seconds) == turn
    if ok and all(isinstance(s, int | float) and 0 < s < float("inf") for s in seconds):
        return [float(s) for s in seconds]
    peer.note = (
        f"failed: malformed step reply {_clip(json.dumps(seconds))} as 'seconds' "
        f"(expected a list of {turn} positive times); log {peer.log}"
    )
    return None


def _note_row(base: Record, name: str, note: str) -> Record:
    """A row without a measurement, so the table can say why a peer is missing."""
    return {**base, "column": name, "repeat": -1, "seconds": float("nan"), "note": note}
