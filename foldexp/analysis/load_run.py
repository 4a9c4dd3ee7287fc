"""``foldexp.load_run(path)``: a trained run in Python, as ``foldexp predict`` uses it.

The run folder is read exactly as ``foldexp predict`` and ``eval`` read it (untrusted: only
foldexp's registered targets are built, unless ``allow_targets`` names more; files checked
against their ``.sha256``): the model with its best weights in eval mode, its resolved config
and dataset facts, and ``predict(inputs)``, which reads a list of inputs as the run's
``foldexp predict`` reads a file's (SMILES, sentences, PTB trees or calculator expressions) and
returns the same columns: the input, one column per target or class, and ``error``::

    import foldexp
    run = foldexp.load_run("outputs/esol_weave/2026-11-23_16-54-39")
    run.predict(["CCO", "c1ccccc1"])     # a DataFrame: input, the targets' columns, error
    run.model, run.config["model"]       # the nn.Module (eval mode) and its settings
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import pandas as pd
import torch

from foldexp.analysis.predict import _predict_all
from foldexp.analysis.predict_inputs import input_reader
from foldexp.train.runs import load_trained

__all__ = ["LoadedRun", "load_run"]


class LoadedRun:
    """A trained run: ``model`` (best weights, eval mode), ``config`` (the resolved training
    config, a dict), ``info`` (the dataset facts the model was built from), ``folder``."""

    def __init__(self, folder: Path, model: torch.nn.Module, config: dict, info: dict) -> None:
        self.folder, self.model, self.config, self.info = folder, model, config, info

    def __repr__(self) -> str:
        return f"LoadedRun({str(self.folder)!r}, model={type(self.model).__name__})"

    @property
    def columns(self) -> list[str]:
        """The prediction columns: one per target (in its units) or per class (probability)."""
        return list(self.model.prediction_columns())  # type: ignore[operator]

    def predict(self, inputs: Sequence[str] | str, batch_size: int = 256) -> pd.DataFrame:
        """Predictions for ``inputs`` (one string, or a list), a row each, in their order: the
        input, ``columns``, and ``error`` (an input that cannot be read gets its reason and
        empty predictions, as in ``foldexp predict``)."""
        texts = [inputs] if isinstance(inputs, str) else [str(x) for x in inputs]
        if batch_size < 1:
            raise ValueError(f"batch_size={batch_size}; expected a value >= 1")
        _, parse = input_reader(self, "<inputs>")  # type: ignore[arg-type]
        parsed = parse(texts, list(range(1, len(texts) + 1)))
        outcomes = _predict_all(self, parsed, batch_size)  # type: ignore[arg-type]
        columns, rows = self.columns, []
        for text, outcome in zip(texts, outcomes, strict=True):
            if isinstance(outcome, list):
                rows.append([text, *outcome, ""])
            else:
                rows.append([text, *([float("nan")] * len(columns)), outcome or "unreadable"])
        return pd.DataFrame(rows, columns=["input", *columns, "error"])


def load_run(
    path: str | Path, allow_targets: Iterable[str] = (), checkpoint: str = "best.pt"
) -> LoadedRun:
    """The trained run in folder ``path`` (``checkpoints/<checkpoint>``, the best by default).

    ``allow_targets``: ``_target_``s outside foldexp's registry the folder may name (your own
    model class): a run folder is untrusted, so anything else is refused.
    """
    run = load_trained(path, allow_targets, checkpoint)
    return LoadedRun(run.folder, run.model.eval(), run.config, run.info)
