"""``bench=peers``: the same Tree-LSTM training step in every implementation, side by side.

All peers get the same trees -- written once to ``peers_trees.json`` in the run folder -- the
same sizes (by default hidden 128, embeddings 128, vocabulary 1000, 5 classes, 256 random
trees of 64 leaves) and do the same work per step: forward, mean cross-entropy at the roots,
backward.

Each peer runs in its own process (``peer_process.py`` starts ``peer_worker.py``): DyNet reads
its autobatching mode before import, and a missing or broken library then costs only its own row
("skipped: ..."). Replies come back on a pipe of their own, never the peer's stdout (libraries
print notices there), and a peer that crashes, hangs past ``timeout_s`` or garbles a reply
becomes a row saying so ("failed: ..."), never an error of the bench.

All processes start first and wait; the bench then asks each in turn for ``steps_per_turn``
steps back to back, round after round (rotating who goes first), so every peer's repeats are
spread over the same stretch of time and share the same background load. Every step is one
timed repeat. Several steps per turn measure what a training loop sees, steps back to back: on these
VMs a multi-threaded step that follows seconds of idling (the other peers' turns) tends to run
slower than one that follows another step. The per-tree loops are about 30x slower than
the rest, so they step over the first ``loop_trees`` trees only (trees/s stays comparable).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from foldexp.bench.grid import Cell, Record
from foldexp.bench.peer_process import PeerProcess, child_env, clip
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
    "loop_plain": "plain per-tree PyTorch loop, a user's own cells (as engine_plain)",
    "level": "hand-written level-by-level batching (PyTorch)",
    "dynet": "DyNet, autobatch off",
    "dynet_ab1": "DyNet, autobatch 1",
    "dynet_ab2": "DyNet, autobatch 2",
    "torchfold": "torchfold",
    "dgl": "DGL (prop_nodes, graph build included)",
}

#: Peers whose ``setup`` lives in a file the worker loads by path instead of ``peer_torch``:
#: DyNet's, whose process must never import torch. Also the seam for peers from elsewhere --
#: tests register fake ones: ``PEERS[name] = description; PEER_MODULES[name] = path``.
PEER_MODULES: dict[str, Path] = {
    name: Path(__file__).with_name("peer_dynet.py") for name in ("dynet", "dynet_ab1", "dynet_ab2")
}


def _python(cfg_python: str) -> str:
    return cfg_python or sys.executable


def peer_cells(bench: Any, env: Env, seed: int, out_dir: Path, device: Any = None) -> list[Cell]:
    """Start, one cell per round (warm-up rounds first), stop. ``device`` (the bench's device
    config) passes ``onednn``, ``fused_cells``, ``flush_denormal`` and ``keep_memory`` on to every
    peer process alike."""
    pc = bench.peers
    rounds = _PeerRounds(pc, env, seed, out_dir, device)
    cells = [Cell("peers: start processes", rounds.start)]
    for w in range(pc.warmup):
        cells.append(Cell(f"peers warm-up {w}", lambda w=w: rounds.round(w, True)))
    for r in range(pc.repeats):
        cells.append(Cell(f"peers round {r}", lambda r=r: rounds.round(r, False)))
    cells.append(Cell("peers: stop processes", rounds.stop))
    return cells


class _PeerRounds:
    """The peer processes of one bench run: all started together, then asked for their steps in
    turn, round after round; a peer that fails leaves with a row saying why."""

    def __init__(self, pc: Any, env: Env, seed: int, out_dir: Path, device: Any) -> None:
        self.pc, self.env, self.seed, self.out_dir, self.device = pc, env, seed, out_dir, device
        self.peers: list[PeerProcess] = []
        self.digest = ""
        self.base: Record = {
            "experiment": "peers",
            "mode": "training",
            "size": pc.leaves,
            "shape": "random",
            "state_size": pc.hidden,
            "unit": "trees",
        }

    def start(self) -> list[Record]:
        """Writes the trees, starts every peer and waits for each to say it is ready."""
        pc = self.pc
        trees_file = self._write_trees()
        logs = self.out_dir / "peers"
        logs.mkdir(parents=True, exist_ok=True)
        env_vars = child_env(self.env.threads)
        records: list[Record] = []
        for name in pc.implementations:
            per_tree = name in ("loop", "loop_plain") and pc.loop_trees > 0
            n = min(pc.loop_trees, pc.trees) if per_tree else pc.trees
            params = self._params(name, trees_file, n)
            try:
                peer = PeerProcess(name, params, _python(pc.python), env_vars, logs / f"{name}.log",
                             pc.timeout_s)  # fmt: skip
            except OSError as exc:  # e.g. bench.peers.python names no interpreter
                note = f"failed: cannot start {_python(pc.python)}: {exc}"
                records.append(_note_row(self.base, name, note))
                continue
            peer.count = n  # type: ignore[attr-defined]
            self.peers.append(peer)
        return records + self._await_ready()

    def _write_trees(self) -> Path:
        pc, seed = self.pc, self.seed
        trees = make_trees(pc.trees, pc.leaves, pc.vocab, seed)
        labels = np.random.default_rng(seed + 1).integers(pc.classes, size=pc.trees).tolist()
        trees_file = self.out_dir / "peers_trees.json"
        trees_file.write_text(json.dumps({"trees": trees, "labels": labels}))
        self.digest = trees_digest(trees)
        return trees_file

    def _params(self, name: str, trees_file: Path, count: int) -> dict[str, Any]:
        """What the worker of peer ``name`` is started with (``peer_worker.py``)."""
        pc, device = self.pc, self.device
        params = {
            "trees_file": str(trees_file),
            "count": count,
            "vocab": pc.vocab,
            "embed": pc.embed,
            "hidden": pc.hidden,
            "classes": pc.classes,
            "threads": self.env.threads,
            "seed": self.seed,
            "dynet_mem": pc.dynet_mem,
            "keep_memory": bool(getattr(device, "keep_memory", True)),
            "onednn": getattr(device, "onednn", None),
            "fused_cells": getattr(device, "fused_cells", None),
            "compile": _mode_name(getattr(device, "compile", None)),
            "flush_denormal": bool(getattr(device, "flush_denormal", True)),
        }
        if name in PEER_MODULES:
            params["module"] = str(PEER_MODULES[name])
        return params

    def _await_ready(self) -> list[Record]:
        """Collects every started peer's first reply (they start in parallel); a peer that does
        not answer ``ready`` leaves with a row."""
        records: list[Record] = []
        for peer in list(self.peers):
            reply = peer.read()
            if reply is not None and reply.get("status") == "ready":
                peer.meta = reply
                continue
            if reply is not None:
                kind = "skipped" if reply.get("status") == "unavailable" else "failed"
                peer.note = _refusal(reply, kind)
            self.peers.remove(peer)
            peer.close()
            records.append(_note_row(self.base, peer.name, peer.note))
        return records

    def round(self, r: int, warm: bool) -> list[Record]:
        """Round ``r``: each live peer in turn (rotated by ``r``) runs ``steps_per_turn`` steps;
        a warm-up round records nothing."""
        records: list[Record] = []
        live = self.peers
        k = r % max(1, len(live))
        turn = self.pc.steps_per_turn
        for peer in live[k:] + live[:k]:
            reply = peer.read() if peer.send(f"step {turn}") else None
            seconds = _step_seconds(peer, reply, turn)
            if seconds is None:
                live.remove(peer)
                peer.close()
                records.append(_note_row(self.base, peer.name, peer.note))
                continue
            if not warm:
                assert reply is not None  # _step_seconds returns times only with a reply
                records += self._rows(peer, reply, seconds, r * turn)
        return records

    def _rows(
        self, peer: PeerProcess, reply: dict[str, Any], seconds: list[float], first: int
    ) -> list[Record]:
        """One row per step of a turn, repeats numbered from ``first``."""
        return [
            {
                **self.base,
                "column": peer.name,
                "repeat": first + j,
                "seconds": sec,
                "batch_size": peer.count,  # type: ignore[attr-defined]
                "items": peer.count,  # type: ignore[attr-defined]
                "calls": reply.get("calls"),
                "schedule_s": reply.get("build_s"),
                "loss": reply.get("loss"),
                "load": os.getloadavg()[0],
                "note": f"{peer.meta.get('version', '')}; trees {self.digest}",
            }
            for j, sec in enumerate(seconds)
        ]

    def stop(self) -> list[Record]:
        for peer in self.peers:
            peer.close()
        return []


def _refusal(reply: dict[str, Any], kind: str) -> str:
    """The note for a peer whose first reply is not ``ready``."""
    reason = reply.get("reason")
    if not isinstance(reason, str) or not reason:
        reason = f"unexpected first reply {clip(json.dumps(reply))} (expected status 'ready')"
    return f"{kind}: {reason}"


def _step_seconds(peer: PeerProcess, reply: dict[str, Any] | None, turn: int) -> list[float] | None:
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
        f"failed: malformed step reply {clip(json.dumps(seconds))} as 'seconds' "
        f"(expected a list of {turn} positive times); log {peer.log}"
    )
    return None


def _note_row(base: Record, name: str, note: str) -> Record:
    """A row without a measurement, so the table can say why a peer is missing."""
    return {**base, "column": name, "repeat": -1, "seconds": float("nan"), "note": note}


def _mode_name(mode: object) -> str | None:
    """``device.compile`` as its plain name (the schema keeps an enum member) for a worker."""
    return None if mode is None else str(getattr(mode, "value", mode))
