"""``bench=peers``: the same Tree-LSTM training step in every implementation, side by side.

All peers get the same trees -- written once to ``peers_trees.json`` in the run folder -- the
same sizes (issue 7: hidden 128, embeddings 128, vocabulary 1000, 5 classes, 256 random trees of
64 leaves) and do the same work per step: forward, mean cross-entropy at the roots, backward.

Each peer runs in its own process (``peer_worker.py``): DyNet reads its autobatching mode before
import, and a missing or broken library then costs only its own row ("skipped: ..."). All
processes start first and wait; the bench then asks each in turn for ``steps_per_turn`` steps
back to back, round after round (rotating who goes first), so every peer's repeats are spread
over the same stretch of time and share the same background load. Every step is one timed
repeat. Several steps per turn measure what a training loop sees, steps back to back: on these
VMs a multi-threaded step that follows seconds of idling (the other peers' turns) tends to run
slower than one that follows another step. The plain per-tree loop is about 30x slower than
the rest, so it steps over the first ``loop_trees`` trees only (trees/s stays comparable).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np

from foldexp.bench.cells import Cell, Record
from foldexp.bench.timing import Env
from foldexp.bench.trees import make_trees, trees_digest

__all__ = ["PEERS", "peer_cells"]

PEERS = {
    "engine": "foldexp engine (trace + schedule + run)",
    "engine_cached": "foldexp engine, per-input traces cached (schedule + run)",
    "engine_agenda": "foldexp engine, DyNet's agenda order instead of depth",
    "engine_unmerged": "foldexp engine, equal invocations not merged (every leaf computed)",
    "engine_mkl": "foldexp engine, torch's default MKL matmuls instead of oneDNN",
    "loop": "plain per-tree PyTorch loop",
    "level": "hand-written level-by-level batching (PyTorch)",
    "dynet": "DyNet, autobatch off",
    "dynet_ab1": "DyNet, autobatch 1",
    "dynet_ab2": "DyNet, autobatch 2",
    "torchfold": "torchfold",
    "dgl": "DGL (prop_nodes, graph build included)",
}

WORKER = Path(__file__).with_name("peer_worker.py")


class _Peer:
    """One worker process and its line protocol, with a timeout on every reply."""

    def __init__(self, name: str, params: dict[str, Any], python: str, env: dict[str, str],
                 log: Path, timeout: float) -> None:  # fmt: skip
        self.name, self.timeout = name, timeout
        self.log = log
        self._err = log.open("w")
        self.proc = subprocess.Popen(
            [python, str(WORKER), name, json.dumps(params)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._err,
            text=True,
            env=env,
        )
        self.meta: dict[str, Any] = {}
        self.note = ""

    def read(self) -> dict[str, Any] | None:
        timer = threading.Timer(self.timeout, self.proc.kill)
        timer.start()
        try:
            line = self.proc.stdout.readline() if self.proc.stdout else ""
        finally:
            timer.cancel()
        if not line:
            tail = self.log.read_text(errors="replace").strip().splitlines()[-3:]
            self.note = f"failed: {' | '.join(tail) or 'no reply (timeout or crash)'}"
            return None
        return json.loads(line)

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
        for f in (self.proc.stdin, self.proc.stdout, self._err):
            if f is not None and not f.closed:
                try:
                    f.close()
                except OSError:  # a pipe whose reader is gone
                    pass


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
                "onednn": bool(getattr(device, "onednn", True)),
            }
            peer = _Peer(name, params, _python(pc.python), child_env, logs / f"{name}.log",
                         pc.timeout_s)  # fmt: skip
            peer.count = n  # type: ignore[attr-defined]
            state["peers"].append(peer)
        records = []
        for peer in list(state["peers"]):  # all start in parallel; collect their replies
            reply = peer.read()
            if reply is not None and reply.get("status") == "ready":
                peer.meta = reply
                continue
            if reply is not None:
                peer.note = f"skipped: {reply.get('reason', 'unavailable')}"
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
            if reply is None:
                live.remove(peer)
                peer.close()
                records.append(_note_row(base, peer.name, peer.note))
                continue
            if warm:
                continue
            seconds = reply.pop("seconds")
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


def _note_row(base: Record, name: str, note: str) -> Record:
    """A row without a measurement, so the table can say why a peer is missing."""
    return {**base, "column": name, "repeat": -1, "seconds": float("nan"), "note": note}
