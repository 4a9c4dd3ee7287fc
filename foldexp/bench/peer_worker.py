"""One peer implementation in its own process: ``python peer_worker.py NAME PARAMS_JSON``.

Run as a script (never imported by the bench), so a library that must be configured before it
is imported (DyNet) gets a fresh process, and one that is missing or broken can only skip its own
row. Protocol, one JSON object per line on stdout:

1. setup (build the model, load the trees from ``params["trees_file"]``), then print
   ``{"status": "ready", ...}`` or ``{"status": "unavailable", "reason": ...}`` and exit;
2. for every line ``step K`` on stdin (``step`` alone: K = 1): run K batches back to back
   (forward, loss, backward) and print ``{"seconds": [one per batch], ...}`` with the last
   batch's extra numbers; ``quit`` ends the process.

The bench drives all peers' processes in turn, one step each per round, so every peer is timed
side by side under the same background load.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _setup(name: str, params: dict, trees: list, labels: list[int]) -> tuple:
    if name.startswith("dynet"):
        # Load by path: importing the foldexp package would import torch into DyNet's process.
        spec = importlib.util.spec_from_file_location("peer_dynet", HERE / "peer_dynet.py")
        mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        spec.loader.exec_module(mod)  # type: ignore[union-attr]
        return mod.setup(name, params, trees, labels)
    import torch

    torch.set_num_threads(max(1, int(params.get("threads", 1))))
    from foldexp.bench import peer_torch
    from foldexp.kernels import set_onednn_enabled

    set_onednn_enabled(bool(params.get("onednn", True)))
    return peer_torch.setup(name, params, trees, labels)


def _keep_freed_memory() -> None:
    # Loaded by path, like peer_dynet: importing the foldexp package would import torch.
    spec = importlib.util.spec_from_file_location("memory", HERE.parent / "kernels" / "memory.py")
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    mod.keep_freed_memory()


def _emit(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main(argv: list[str]) -> int:
    name, params = argv[0], json.loads(argv[1])
    data = json.loads(Path(params["trees_file"]).read_text())
    count = int(params.get("count", len(data["trees"])))  # a prefix, for the slowest peers
    if params.get("keep_memory"):  # every peer alike, as ``device.keep_memory`` in the bench
        _keep_freed_memory()
    trees = [_tuples(t) for t in data["trees"][:count]]
    try:
        step, meta = _setup(name, params, trees, data["labels"][:count])
    except Exception as e:  # an unavailable or broken library skips this peer only
        reason = str(e) if type(e).__name__ == "Unavailable" else f"{type(e).__name__}: {e}"
        _emit({"status": "unavailable", "reason": reason})
        return 0
    _emit({"status": "ready", "pid": os.getpid(), **meta})
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] == "quit":
            break
        seconds, extra = [], {}
        for _ in range(int(cmd[1]) if len(cmd) > 1 else 1):
            t0 = time.perf_counter()
            extra = step()
            seconds.append(time.perf_counter() - t0)
        _emit({"seconds": seconds, **extra})
    return 0


def _tuples(node: list) -> tuple:
    """JSON lists back to nested tuples, without recursion."""
    stack: list[tuple[list, bool]] = [(node, False)]
    out: list[tuple] = []
    while stack:
        n, done = stack.pop()
        if len(n) == 1 and not isinstance(n[0], list):
            out.append((n[0],))
        elif done:
            right = out.pop()
            left = out.pop()
            out.append((left, right))
        else:
            stack += [(n, True), (n[1], False), (n[0], False)]
    return out[0]


if __name__ == "__main__":
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]  # no shadowing
    sys.exit(main(sys.argv[1:]))
