"""The model contract: what ``foldexp train``, ``eval`` and ``predict`` call on a model.

A model is an ``nn.Module`` built as ``Model(**model_config, **dataset_info)``: the keys of its
own config (``conf/model/*.yaml`` or ``model._target_=… +model.key=…``) plus those entries of the
dataset's ``info`` (vocabulary, number of classes, feature sizes, target statistics) that its
constructor names — a model that takes ``**kwargs`` receives all of them.

Required: ``collate`` (runs in DataLoader workers; traces and schedules a batch with the engine),
``forward`` (a dict with ``"loss"``, the batch's mean loss, plus any statistics to sum over an
epoch: scalars are added up, tensors with a leading example axis are concatenated) and
``summarize`` (those sums → the metrics written as ``<split>_<name>`` columns of
``metrics.csv``).

Optional: ``predict(batch)`` → ``(examples, columns)`` values for ``foldexp predict`` (class
probabilities or targets in original units), with ``prediction_columns()`` naming the columns;
``param_groups()`` → parameter groups with their own optimizer settings;
``root_probabilities`` / ``score_roots`` for ``foldexp ensemble``; ``prepare_training(setup)``,
called once before the first step (of a fresh or a resumed run) with a ``TrainingSetup``: the
training examples and access to trained runs, for a model that derives its own targets from them
(distillation: ``foldexp.models.distill``); ``calibrate(dev_examples, batch_size)`` → a dict,
called once training ends, on the best weights, before the test (``foldexp.train.calibration``:
an uncertainty's scale set in the model's state and saved with it). The trainer knows no model's
keys: what a model needs beyond ``collate``/``forward`` it takes through these hooks.

A minimal model of one's own (a bag of words over ``text_csv`` examples, ``(tokens, label)``)::

    from typing import Any, NamedTuple
    import torch, torch.nn.functional as F
    import foldexp.blocks as fb
    from foldexp import Compiler

    class Batch(NamedTuple):  # what collate gives forward: any object of one's own
        plan: Any  # the engine's schedule for the batch
        labels: torch.Tensor  # (examples,)
        size: int

    class BagOfWords(torch.nn.Module):
        def __init__(self, vocab, num_classes, size: int = 32):
            super().__init__()
            word = fb.InputTransform(vocab.index) >> fb.Scalar("int64")
            word = word >> fb.Function(fb.Embedding(len(vocab), size))
            self.compiler = Compiler(fb.GetItem(0) >> fb.Map(word) >> fb.Mean())
            self.out = torch.nn.Linear(size, num_classes)

        def collate(self, examples):
            plan = self.compiler.build(examples)
            return Batch(plan, torch.tensor([y for _, y in examples]), len(examples))

        def forward(self, batch):
            logits = self.out(self.compiler.run(batch.plan))
            return {"loss": F.cross_entropy(logits, batch.labels),
                    "correct": (logits.argmax(1) == batch.labels).sum(), "count": batch.size}

        def summarize(self, sums):
            return {"accuracy": sums["correct"] / max(1, sums["count"])}
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch

__all__ = [
    "Batch",
    "FoldModel",
    "ModelContractError",
    "OPTIONAL",
    "REQUIRED",
    "TrainingSetup",
    "check_model",
]

REQUIRED = ("collate", "forward", "summarize")
OPTIONAL = (
    "predict",
    "prediction_columns",
    "param_groups",
    "root_probabilities",
    "score_roots",
    "prepare_training",
)


class ModelContractError(TypeError):
    """A model lacks what foldexp calls on it."""


@runtime_checkable
class Batch(Protocol):
    """What ``collate`` returns: anything with the number of examples it holds."""

    size: int


@runtime_checkable
class TrainingSetup(Protocol):
    """What ``foldexp train`` hands a model's optional ``prepare_training`` hook.

    The trainer restores every RNG after the hook, so a hook that builds models (which draws
    from the RNG) leaves the run as reproducible and resumable as one without it.
    """

    train: Sequence[Any]  # the training examples, in the dataset's order
    batch_size: int  # ``trainer.eval_batch_size``: for passes over the examples without gradients

    def load_runs(
        self, dirs: Sequence[str | Path], mismatch: Callable[[Path, str], str]
    ) -> Iterator[tuple[Path, torch.nn.Module]]:
        """Each trained run under ``dirs`` with its model (best weights, evaluation mode), one
        at a time. Every run must have trained on ``train``; one that did not raises
        ``ValueError(mismatch(run, keys))``, ``keys`` naming the dataset keys that differ."""
        ...

    def trained_model(self, folder: str | Path) -> torch.nn.Module:
        """A trained run's model (best weights), any data it saw: ``model.init_from``."""
        ...


@runtime_checkable
class FoldModel(Protocol):
    """The methods ``foldexp train`` needs (see the module docstring for the optional ones)."""

    def collate(self, examples: Sequence[Any]) -> Batch: ...

    def forward(self, batch: Any) -> Mapping[str, torch.Tensor | float]: ...

    def summarize(self, sums: Mapping[str, Any]) -> dict[str, float]: ...

    # Optional (not part of the runtime check): ``prepare_training(setup: TrainingSetup) -> None``
    # is called once after the model is built, before the optimizer and the first step.


def check_model(model: Any, target: str) -> None:
    """Fails before any work when ``model`` lacks a required method, naming what is missing."""
    if not isinstance(model, torch.nn.Module):
        raise ModelContractError(
            f"model {target} built a {type(model).__name__}, not a torch.nn.Module"
        )
    missing = [name for name in REQUIRED if not callable(getattr(model, name, None))]
    if missing:
        raise ModelContractError(
            f"model {target} does not follow foldexp's model contract "
            f"(foldexp.models.contract): it has no {', '.join(missing)} method"
            f"{'s' if len(missing) > 1 else ''}; every model needs {', '.join(REQUIRED)}"
        )
