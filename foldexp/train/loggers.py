"""Where a run's numbers go: the ``logger`` config group (``csv``, ``tensorboard``, ``none``).

``logger=csv`` (the default) writes ``metrics.csv`` every epoch and draws the learning curves
from it; ``logger=tensorboard`` writes TensorBoard event files under ``<run>/tensorboard``
(the training loss every ``log_every_n_steps`` steps, every epoch's metrics, the config as
text, and at the end the run's config keys and final scores as TensorBoard HParams data, so
that the jobs of a multirun compare in its HParams view: ``tensorboard --logdir SWEEP_DIR``);
``logger=[csv,tensorboard]`` does both and ``logger=none`` neither (``results.json`` and
the checkpoints are written in any case). ``ProgressLog`` writes a line every
``trainer.log_every_s`` seconds inside an epoch when stderr is not a terminal (a batch job's log
file), where tqdm's bar (``progress_bar``) is silent, so a log is never quiet for minutes.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from tqdm import tqdm

__all__ = ["RunLoggers", "ProgressLog", "progress_bar"]

log = logging.getLogger("foldexp.train")


class _TensorBoard:
    """Scalars per step and per epoch, and the config as text, in ``<run>/tensorboard``."""

    def __init__(
        self, out_dir: Path, config: Mapping[str, Any], every: int, first_step: int
    ) -> None:
        from torch.utils.tensorboard import SummaryWriter

        # purge_step drops events a killed run wrote after its last checkpoint, so a resumed
        # run's curves have no doubled steps.
        self.writer = SummaryWriter(str(out_dir / "tensorboard"), purge_step=first_step or None)
        self.every = every
        if not first_step:
            text = yaml.safe_dump(dict(config), sort_keys=False)
            self.writer.add_text("config", "```\n" + text + "\n```", 0)

    def step(self, step: int, loss: float) -> None:
        if step % self.every == 0:
            self.writer.add_scalar("train/loss_step", loss, step)

    def epoch(self, row: Mapping[str, Any]) -> None:
        for key, value in row.items():
            if key not in ("epoch", "step") and isinstance(value, (int, float)):
                split, _, name = key.partition("_")
                tag = f"{split}/{name}" if name else key
                self.writer.add_scalar(tag, value, row["epoch"])
        self.writer.flush()

    def results(self, results: Mapping[str, Any]) -> None:
        """The run's config keys (numbers, strings, booleans: ``optimizer.lr``) and its final
        scores (``best_<select>``, ``test_*``) as one HParams session of this folder."""
        config = _flat(results.get("config") or {})
        hparams = {k: v for k, v in config.items() if not k.startswith(("paths.", "hydra."))}
        scores = {
            f"hparam/{k}": float(v)
            for k, v in results.items()
            if (k.startswith(("test_", "best_")) or k == "best_epoch")
            and isinstance(v, (int, float))
            and not isinstance(v, bool)
        }
        self.writer.add_hparams(hparams, scores, run_name=".")
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def _flat(node: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"optimizer": {"lr": 0.1}}`` → ``{"optimizer.lr": 0.1}``: scalars only (HParams takes
    numbers, strings and booleans; a list is written as its text)."""
    out: dict[str, Any] = {}
    for key, value in node.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flat(value, f"{name}."))
        elif isinstance(value, (bool, int, float, str)):
            out[name] = value
        elif isinstance(value, (list, tuple)):
            out[name] = str(list(value))
    return out


class RunLoggers:
    """The loggers ``chosen`` (the settings' ``logger``: ``csv``, ``tensorboard``, each null
    when off) selects, behind one call per step and per epoch; ``config``: the run's plain
    config, which TensorBoard shows as text."""

    def __init__(
        self,
        chosen: Mapping[str, Any],
        config: Mapping[str, Any],
        out_dir: Path,
        first_step: int,
        enabled: bool,
    ) -> None:
        self.csv = enabled and chosen.get("csv") is not None
        self.board = None
        board = chosen.get("tensorboard")
        if enabled and board is not None:
            every = int(board["log_every_n_steps"])
            self.board = _TensorBoard(out_dir, config, every, first_step)

    def step(self, step: int, loss: float) -> None:
        if self.board is not None:
            self.board.step(step, loss)

    def epoch(self, row: Mapping[str, Any]) -> None:
        if self.board is not None:
            self.board.epoch(row)

    def results(self, results: Mapping[str, Any]) -> None:
        if self.board is not None:
            self.board.results(results)

    def close(self) -> None:
        if self.board is not None:
            self.board.close()


class ProgressLog:
    """A log line every ``every_s`` seconds of an epoch, when stderr is not a terminal."""

    def __init__(self, every_s: float, total: int, epoch: int) -> None:
        self.every_s = every_s if every_s > 0 and not sys.stderr.isatty() else 0.0
        self.total, self.epoch = total, epoch
        self.started = self.last = time.perf_counter()

    def update(self, batch: int, loss: float) -> None:
        if not self.every_s:
            return
        now = time.perf_counter()
        if now - self.last >= self.every_s:
            self.last = now
            rate = batch / max(now - self.started, 1e-9)
            log.info(
                "epoch %d: batch %d/%d, loss %.4f, %.1f batches/s",
                self.epoch,
                batch,
                self.total,
                loss,
                rate,
            )


def progress_bar(it: Iterable[Any], enabled: bool, **kw: Any) -> Any:
    """A tqdm bar over ``it``, shown only when ``enabled`` and stderr is a terminal."""
    return tqdm(it, disable=not (enabled and sys.stderr.isatty()), leave=False, **kw)
