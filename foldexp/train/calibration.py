"""Calibrating a trained model's uncertainty on the dev split, before the test.

A model may define ``calibrate(dev_examples, batch_size) -> dict`` (optional, like
``prepare_training``; ``foldexp.models.contract``): it sets what it calibrates in its own state
(buffers, e.g. ``model.uncertainty=mve``'s scale, ``foldexp.models.uncertainty``) and returns
it as plain values for ``results.json``. ``calibrate_best`` calls it once the best weights are
back, then writes ``best.pt`` again, so that ``predict`` and ``eval`` apply it.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

__all__ = ["calibrate_best"]

log = logging.getLogger("foldexp.train")


def calibrate_best(run: Any) -> dict[str, Any]:
    """The model's ``calibrate`` hook over ``run``'s dev split (``{}`` without one, or when it
    calibrates nothing); ``best.pt`` is saved again with the calibrated state."""
    hook = getattr(run.model, "calibrate", None)
    if not callable(hook) or not len(run.bundle.dev):
        return {}
    with torch.no_grad():
        found = hook(run.bundle.dev, run.trainer.eval_batch_size)
    if found:
        run.checkpoint(run.best)  # best weights, calibrated: what predict loads
        log.info("calibrated on dev: %s", found)
    return dict(found)
