"""``run_train(cfg)``: the training loop behind ``foldexp train``.

Builds the dataset and model from their ``_target_`` configs, trains with per-epoch dev
evaluation, keeps the best checkpoint by ``trainer.select_metric``, stops early on patience,
evaluates the best checkpoint on test and returns the final metrics (also in ``results.json``).

Batches are traced and scheduled by ``model.collate`` inside DataLoader workers
(``trainer.num_workers``), so the next batch's schedule is built while the current one trains.
A killed run continues with ``trainer.resume=true`` from ``checkpoints/last.pt`` and ends with
the same result as an uninterrupted run: the data order depends only on (seed, epoch), the
position inside the epoch is saved, and so is every RNG.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from torch.utils.data import DataLoader
from tqdm import tqdm

from foldexp.train.artifacts import plot_curves, write_json, write_metrics_csv
from foldexp.train.checkpoint import load_checkpoint, save_checkpoint, seed_everything

__all__ = ["run_train", "TrainingDiverged", "resolve_device"]

log = logging.getLogger("foldexp.train")


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite; the last good checkpoint is kept."""


def resolve_device(name: str) -> torch.device:
    """``cpu`` | ``cuda`` | ``auto`` → a device; ``cuda`` without a GPU fails at once."""
    name = str(getattr(name, "value", name))
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(
            "device.name=cuda but torch sees no CUDA device; use device=cpu or device=auto"
        )
    return torch.device(name)


def _loader(
    model: Any, examples: list[Any], batch_size: int, workers: int, seed: int
) -> DataLoader:
    # A private generator: the DataLoader would otherwise draw its worker seed from the global
    # RNG, which would make a resumed run differ from an uninterrupted one.
    return DataLoader(
        examples,
        batch_size=batch_size,
        shuffle=False,
        collate_fn=model.collate,
        num_workers=workers,
        generator=torch.Generator().manual_seed(seed),
        persistent_workers=False,
    )


def _limit(it: Iterable[Any], n: int) -> Iterable[Any]:
    for i, x in enumerate(it):
        if n and i >= n:
            return
        yield x


def _progress(it: Iterable[Any], enabled: bool, **kw: Any) -> Any:
    return tqdm(it, disable=not (enabled and sys.stderr.isatty()), leave=False, **kw)


def evaluate(
    model: Any, examples: list[Any], cfg: DictConfig, device: torch.device, prefix: str
) -> dict[str, float]:
    """Mean loss and the model's metrics over ``examples``, without gradients."""
    model.eval()
    sums: dict[str, float] = {}
    n = 0
    loader = _loader(model, examples, cfg.trainer.eval_batch_size, cfg.trainer.num_workers, 0)
    with torch.no_grad():
        for batch in _progress(
            _limit(loader, cfg.trainer.limit_batches), cfg.trainer.progress, desc=prefix
        ):
            out = model(batch)
            n += batch.size
            for k, v in out.items():
                w = batch.size if k == "loss" else 1
                sums[k] = sums.get(k, 0.0) + float(v) * w
    metrics = {"loss": sums.get("loss", 0.0) / max(1, n), **model.summarize(sums)}
    return {f"{prefix}_{k}": v for k, v in metrics.items()}


def run_train(cfg: DictConfig) -> dict[str, Any]:
    """Trains the configured model; returns the final metrics (best dev, test)."""
    device = resolve_device(cfg.device.name)
    if cfg.device.threads:
        torch.set_num_threads(cfg.device.threads)
    out_dir = Path(cfg.paths.output_dir)
    ckpt_dir = out_dir / "checkpoints"
    out_dir.mkdir(parents=True, exist_ok=True)
    seed_everything(cfg.seed)
    tc = cfg.trainer

    bundle = instantiate(cfg.dataset, _convert_="all")
    log.info("dataset %s: %s", cfg.dataset.name, bundle.sizes())
    model = instantiate(cfg.model, **bundle.info, _convert_="all").to(device)
    optimizer = instantiate(cfg.optimizer)(p for p in model.parameters() if p.requires_grad)
    select, better = (
        tc.select_metric,
        (max if str(getattr(tc.select_mode, "value", tc.select_mode)) == "max" else min),
    )

    progress: dict[str, Any] = {
        "epoch": 0,
        "batch": 0,
        "step": 0,
        "best": None,
        "best_epoch": -1,
        "bad_epochs": 0,
        "history": [],
        "epoch_sums": {},
        "epoch_n": 0,
        "stopped": "",
    }
    last = ckpt_dir / "last.pt"
    if tc.resume and last.exists():
        progress = load_checkpoint(last, model, optimizer)
        log.info(
            "resumed from %s at epoch %d, batch %d", last, progress["epoch"], progress["batch"]
        )
    elif tc.resume:
        log.info("trainer.resume=true but %s does not exist: starting afresh", last)

    def checkpoint(path: Path) -> None:
        save_checkpoint(path, model, optimizer, progress)

    started = time.perf_counter()
    while progress["epoch"] < tc.epochs and not progress["stopped"]:
        epoch = progress["epoch"]
        order = torch.randperm(
            len(bundle.train), generator=torch.Generator().manual_seed(cfg.seed * 1000 + epoch)
        )
        skip = progress["batch"] * tc.batch_size
        examples = [bundle.train[i] for i in order[skip:].tolist()]
        loader = _loader(model, examples, tc.batch_size, tc.num_workers, cfg.seed + epoch)
        n_batches = math.ceil(len(bundle.train) / tc.batch_size)
        if tc.limit_batches:
            n_batches = min(n_batches, tc.limit_batches)
        model.train()
        t_epoch = time.perf_counter()
        bar = _progress(
            _limit(loader, max(0, n_batches - progress["batch"])),
            tc.progress,
            desc=f"epoch {epoch}",
            total=n_batches,
            initial=progress["batch"],
        )
        for batch in bar:
            out = model(batch)
            loss = out["loss"]
            if not torch.isfinite(loss):
                raise TrainingDiverged(
                    f"loss became {loss.item()} at epoch {epoch}, step {progress['step'] + 1}; "
                    f"the last good checkpoint is {last if last.exists() else 'not written yet'}"
                    " (lower optimizer.lr or set trainer.grad_clip)"
                )
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if tc.grad_clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
            optimizer.step()
            progress["step"] += 1
            progress["batch"] += 1
            progress["epoch_n"] += batch.size
            for k, v in out.items():
                w = batch.size if k == "loss" else 1
                progress["epoch_sums"][k] = (
                    progress["epoch_sums"].get(k, 0.0) + float(v.detach()) * w
                )
            if hasattr(bar, "set_postfix"):
                bar.set_postfix(loss=f"{loss.item():.4f}")
            if tc.checkpoint_every and progress["step"] % tc.checkpoint_every == 0:
                checkpoint(last)
            if tc.max_steps and progress["step"] >= tc.max_steps:
                progress["stopped"] = f"max_steps={tc.max_steps} reached"
                break

        sums, n = progress["epoch_sums"], max(1, progress["epoch_n"])
        row: dict[str, Any] = {
            "epoch": epoch,
            "step": progress["step"],
            "train_loss": sums.get("loss", 0.0) / n,
            **{f"train_{k}": v for k, v in model.summarize(sums).items()},
        }
        row.update(evaluate(model, bundle.dev, cfg, device, "dev"))
        row["epoch_seconds"] = time.perf_counter() - t_epoch
        progress["history"].append(row)
        log.info(
            "epoch %d: %s",
            epoch,
            ", ".join(f"{k}={v:.4f}" for k, v in row.items() if isinstance(v, float)),
        )
        if select not in row:
            raise KeyError(
                f"trainer.select_metric={select!r} is not a metrics.csv column; "
                f"columns are {sorted(row)}"
            )
        score = row[select]
        if progress["best"] is None or better(score, progress["best"]) != progress["best"]:
            progress.update(best=score, best_epoch=epoch, bad_epochs=0)
            checkpoint(ckpt_dir / "best.pt")
        else:
            progress["bad_epochs"] += 1
            if tc.patience and progress["bad_epochs"] >= tc.patience:
                progress["stopped"] = f"no better {select} for {tc.patience} epochs"
        progress.update(epoch=epoch + 1, batch=0, epoch_sums={}, epoch_n=0)
        checkpoint(last)
        write_metrics_csv(out_dir / "metrics.csv", progress["history"])
        if tc.plots:
            plot_curves(out_dir / "metrics.csv", out_dir)

    if progress["stopped"]:
        log.info("stopped early: %s", progress["stopped"])
    load_checkpoint(ckpt_dir / "best.pt", model, restore_rng=False)
    results: dict[str, Any] = {
        "best_epoch": progress["best_epoch"],
        f"best_{select}": progress["best"],
        **evaluate(model, bundle.test, cfg, device, "test"),
        "epochs_run": len(progress["history"]),
        "steps": progress["step"],
        "train_seconds": time.perf_counter() - started,
        "seed": cfg.seed,
        "experiment": cfg.get("task_name", "train"),
        "dataset": cfg.dataset.name,
        "model": cfg.model.name,
        "config": OmegaConf.to_container(cfg, resolve=True),
    }
    write_json(out_dir / "results.json", results)
    log.info(
        "test: %s",
        ", ".join(
            f"{k}={v:.4f}"
            for k, v in results.items()
            if k.startswith("test_") and isinstance(v, float)
        ),
    )
    return results
