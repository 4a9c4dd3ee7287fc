"""Getting N ranks for ``trainer.strategy=ddp``: three launchers, one process group.

- ``trainer.strategy=ddp trainer.processes=N``: ``spawn`` starts N local processes with
  ``torch.multiprocessing`` on a free loopback port; the calling process only waits.
- ``torchrun ... -m foldexp train trainer.strategy=ddp`` (one node or many): torchrun sets
  ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``/``MASTER_ADDR``/``MASTER_PORT``; ``processes`` is
  ignored.
- a submitit job with several tasks (``hydra/launcher=submitit_slurm
  hydra.launcher.tasks_per_node=N``): ``export_submitit_env`` translates the job's tasks into
  the same variables with submitit's own helper.

``setup`` joins the process group: the backend follows the device, ``nccl`` on CUDA (one GPU per
local rank), ``gloo`` on CPU. What the ranks do together once they run is ``distributed.py``.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from foldexp.logs import ConsoleHandler
from foldexp.train.distributed import DistContext

T = TypeVar("T")

__all__ = ["env_count", "export_submitit_env", "launched_world_size", "setup", "spawn", "teardown"]

log = logging.getLogger("foldexp.train")


def env_count(name: str, default: int, low: int = 1) -> int:
    """The whole number the environment variable ``name`` holds (``default`` when unset), at
    least ``low``; anything else is a ``ValueError`` naming the variable (``WORLD_SIZE=abc`` had
    been "invalid literal for int()", ``WORLD_SIZE=0`` a traceback)."""
    text = os.environ.get(name)
    if text is None:
        return default
    try:
        value = int(text.strip())
    except ValueError:
        value = None
    if value is None or value < low or len(text) > 12:
        raise ValueError(
            f"the environment variable {name}={text[:40]!r}; expected a whole number >= {low} "
            "(torchrun and the launchers set it: unset it to run one process)"
        )
    return value


def launched_world_size() -> int:
    """``WORLD_SIZE`` set by torchrun, ``spawn`` or ``export_submitit_env``; 1 when unset."""
    return env_count("WORLD_SIZE", 1)


def export_submitit_env() -> bool:
    """Inside a submitit job of several tasks, exports ``RANK``, ``WORLD_SIZE``, … for env://.

    Returns whether it did. ``CUDA_VISIBLE_DEVICES`` is left alone: ``setup`` picks
    ``cuda:LOCAL_RANK`` as under torchrun.
    """
    if "SUBMITIT_EXECUTOR" not in os.environ or "RANK" in os.environ:
        return False
    import submitit

    if submitit.JobEnvironment().num_tasks <= 1:
        return False
    submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
    return True


def setup(device: torch.device) -> tuple[DistContext, torch.device]:
    """Joins the process group the environment describes; returns the context and the device.

    ``device`` is the configured one; on CUDA each local rank takes ``cuda:LOCAL_RANK``.
    """
    world = env_count("WORLD_SIZE", 1)
    rank, local_rank = env_count("RANK", 0, low=0), env_count("LOCAL_RANK", 0, low=0)
    if rank >= world:
        raise ValueError(f"the environment variable RANK={rank}; expected < WORLD_SIZE={world}")
    if device.type == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, rank=rank, world_size=world)
    ctx = DistContext(rank, world, local_rank, backend)
    if not ctx.is_main:
        # Only rank 0 reports; the others keep their warnings and errors.
        logging.getLogger().setLevel(logging.WARNING)
    return ctx, device


def teardown() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


# --- spawning local processes -------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _logging_spec() -> dict[str, Any]:
    """The root logger's handlers as plain data, so spawned ranks log where the parent does."""
    root = logging.getLogger()
    handlers = []
    for h in root.handlers:
        fmt = h.formatter._fmt if h.formatter else None
        datefmt = h.formatter.datefmt if h.formatter else None
        if isinstance(h, logging.FileHandler):
            handlers.append({"file": h.baseFilename, "fmt": fmt, "datefmt": datefmt})
        elif isinstance(h, logging.StreamHandler):
            name = getattr(h, "stream_name", None) or (
                "stderr" if h.stream is sys.__stderr__ or h.stream is sys.stderr else "stdout"
            )
            handlers.append({"stream": name, "fmt": fmt, "datefmt": datefmt})
    return {"level": root.level, "handlers": handlers}


def _configure_logging(spec: dict[str, Any], rank: int) -> None:
    root = logging.getLogger()
    root.setLevel(spec["level"] or logging.INFO)
    for h in spec["handlers"]:
        if rank and "file" in h:
            continue  # one log file, written by rank 0
        handler: logging.Handler = (
            logging.FileHandler(h["file"], mode="a") if "file" in h else ConsoleHandler(h["stream"])
        )
        fmt = h["fmt"] or "%(message)s"
        handler.setFormatter(
            logging.Formatter(f"[rank {rank}]{fmt}" if rank else fmt, h["datefmt"])
        )
        root.addHandler(handler)


def _die_with_parent(parent: int) -> None:
    """A rank must not outlive the process that spawned it (e.g. after ``kill -9``): an orphan
    would go on training and overwrite the checkpoints of the run that resumes."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def _rank_main(
    rank: int,
    fn: Callable[[T], Any],
    settings: T,
    world: int,
    port: int,
    log_spec: dict[str, Any],
    parent: int,
) -> None:
    _die_with_parent(parent)
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world),
    )
    _configure_logging(log_spec, rank)
    fn(settings)


def spawn(fn: Callable[[T], Any], settings: T, processes: int) -> None:
    """Runs ``fn(settings)`` in ``processes`` new local processes as ranks 0..N-1 and waits.

    If one rank fails, torch stops the others and raises its traceback here. ``settings`` is
    pickled to each: plain values (``RunSettings``, whose interpolations — Hydra's run folder,
    ``now`` — were resolved when it was made: the new processes have no Hydra).
    """
    import torch.multiprocessing as mp

    port = _free_port()
    log.info("spawning %d ranks, rendezvous at 127.0.0.1:%d", processes, port)
    mp.start_processes(
        _rank_main,
        args=(fn, settings, processes, port, _logging_spec(), os.getpid()),
        nprocs=processes,
        join=True,
        start_method="spawn",
    )
