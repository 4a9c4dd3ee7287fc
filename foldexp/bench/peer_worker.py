"""One peer implementation in its own process:
``python peer_worker.py NAME PARAMS_JSON [--reply-fd FD]``.

Run as a script (never imported by the bench), so a library that must be configured before it
is imported (DyNet) gets a fresh process, and one that is missing or broken can only skip its own
row. Protocol, one JSON object per line on the reply channel -- file descriptor ``FD``, a pipe
the bench passes in, or without ``--reply-fd`` the original stdout:

1. setup (build the model, load the trees from ``params["trees_file"]``), then reply
   ``{"status": "ready", ...}``, or ``{"status": "unavailable", "reason": ...}`` (the library
   is missing: the row says skipped) or ``{"status": "failed", "reason": ...}`` and exit;
2. for every line ``step K`` on stdin (``step`` alone: K = 1): run K batches back to back
   (forward, loss, backward) and reply ``{"seconds": [one per batch], ...}`` with the last
   batch's extra numbers (``{"status": "failed", ...}`` if a step raised); ``quit`` ends it.

The reply channel is never the process's stdout: before anything is imported, stdout is pointed
at stderr (the peer's log), so whatever a library prints -- DGL announces itself on its first
import -- cannot be mistaken for a reply.

Which ``setup`` runs: ``params["module"]``, a file loaded by path (DyNet's, so its process never
imports torch; also fake peers in tests), else ``foldexp.bench.peer_torch``.

The bench drives all peers' processes in turn, one step each per round, so every peer is timed
side by side under the same background load.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import TextIO

HERE = Path(__file__).resolve().parent


def _setup(name: str, params: dict, trees: list, labels: list[int]) -> tuple:
    if params.get("module"):
        # Load by path: importing the foldexp package would import torch into DyNet's process.
        path = Path(params["module"])
        spec = importlib.util.spec_from_file_location(path.stem, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load a peer module from {path}")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod.setup(name, params, trees, labels)
    defaults = params.get("threads", 1) is None
    if defaults:
        # foldexp's own defaults: importing it before torch sets OpenMP's wait
        # (foldexp/startup.py); the threads follow foldexp train's rule (foldexp/cpus.py).
        import foldexp.startup  # noqa: F401
    import torch

    from foldexp.bench import peer_torch
    from foldexp.kernels import configure_kernels

    if defaults:
        params = {**params, "threads": default_threads(params, trees)}
    torch.set_num_threads(max(1, int(params.get("threads", 1))))
    configure_kernels(
        params.get("onednn"), params.get("fused_cells"), params.get("flush_denormal", True)
    )
    from foldexp.executor import compile_mode, set_compile_mode

    set_compile_mode(params.get("compile"))  # None: the device's default, as foldexp train
    step, meta = peer_torch.setup(name, params, trees, labels)
    if name.startswith("engine"):  # the route its training step takes, in the row's note
        meta = {**meta, "version": f"{meta.get('version', '')} (device.compile={compile_mode()})"}
    wait = ",".join(
        f"{v}={os.environ[v]}" for v in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT") if v in os.environ
    )
    return step, {**meta, "threads": torch.get_num_threads(), "omp_wait": wait or "default"}


def _keep_freed_memory() -> None:
    # Loaded by path, like peer_dynet: importing the foldexp package would import torch.
    spec = importlib.util.spec_from_file_location("memory", HERE.parent / "kernels" / "memory.py")
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    mod.keep_freed_memory()


def _reply_channel(argv: list[str]) -> tuple[list[str], TextIO]:
    """Split off ``--reply-fd FD``; return the other arguments and the reply channel.

    Either way stdout is pointed at stderr afterwards, so stray prints (a library's import
    notice, a debugging print) land in the peer's log and never in the replies.
    """
    if "--reply-fd" in argv:
        i = argv.index("--reply-fd")
        fd = int(argv[i + 1])
        argv = argv[:i] + argv[i + 2 :]
    else:
        fd = os.dup(1)  # run by hand: replies on the original stdout
    sys.stdout.flush()
    os.dup2(2, 1)
    return argv, os.fdopen(fd, "w", encoding="utf-8")


def _emit(channel: TextIO, obj: dict) -> None:
    channel.write(json.dumps(obj) + "\n")
    channel.flush()


def _reason(exc: BaseException) -> str:
    # a peer module's ``Unavailable`` already reads as a reason; anything else keeps its type
    return str(exc) if type(exc).__name__ == "Unavailable" else f"{type(exc).__name__}: {exc}"


def _load_trees(params: dict) -> tuple[list, list[int]]:
    path = Path(params["trees_file"])
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        # As ``foldexp.data.jsonfile.read_json`` says it; not imported, since importing the
        # foldexp package would import torch into DyNet's process.
        raise ValueError(
            f"{path}:{exc.lineno}:{exc.colno}: expected valid JSON: {exc.msg}"
        ) from None
    count = int(params.get("count", len(data["trees"])))  # a prefix, for the slowest peers
    return [_tuples(t) for t in data["trees"][:count]], data["labels"][:count]


def default_threads(params: dict, trees: list) -> int:
    """The count ``foldexp train`` would take for this step: every CPU this process may use,
    at most one thread per ``WORK_PER_THREAD`` multiply-adds (``foldexp/cpus.py``)."""
    from foldexp.bench import peer_torch
    from foldexp.cpus import available_cpus, threads_for
    from foldexp.train.threads import dense_weights

    model = peer_torch.TreeLSTMParams(
        params["vocab"], params["embed"], params["hidden"], params["classes"]
    )
    nodes, stack = 0, list(trees)
    while stack:  # binary trees as nested tuples: a leaf is (word,), a node (left, right)
        node = stack.pop()
        nodes += 1
        if len(node) == 2:
            stack.extend(node)
    return threads_for(available_cpus(), dense_weights(model) * nodes)


def main(argv: list[str]) -> int:
    argv, channel = _reply_channel(argv)
    name, params = argv[0], json.loads(argv[1])
    try:
        trees, labels = _load_trees(params)
    except Exception as exc:
        _emit(channel, {"status": "failed", "reason": _reason(exc)})
        return 1
    if params.get("keep_memory"):  # every peer alike, as ``device.keep_memory`` in the bench
        _keep_freed_memory()
    try:
        step, meta = _setup(name, params, trees, labels)
    except Exception as exc:  # an unavailable or broken library skips this peer only
        _emit(channel, {"status": "unavailable", "reason": _reason(exc)})
        return 0
    _emit(channel, {"status": "ready", "pid": os.getpid(), **meta})
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] == "quit":
            break
        seconds, extra = [], {}
        try:
            for _ in range(int(cmd[1]) if len(cmd) > 1 else 1):
                t0 = time.perf_counter()
                extra = step()
                seconds.append(time.perf_counter() - t0)
        except Exception as exc:  # reported as this peer's row; the traceback goes to its log
            traceback.print_exc()
            _emit(channel, {"status": "failed", "reason": f"step raised {_reason(exc)}"})
            return 1
        _emit(channel, {"seconds": seconds, **extra})
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
