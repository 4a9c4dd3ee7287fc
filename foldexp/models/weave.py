"""Weave graph convolution (Kearnes et al. 2016; the Fold paper's Appendix B) for molecules.

A molecule is ``(atoms, pairs)``: a sequence of N atom feature vectors and an N × N nested
sequence of pair feature vectors (``foldexp.data.MoleculeGraph``). ``weave_layer`` is the paper's
weave module (``foldexp.models.paper.weave_module``, reused as is) or, for the last layer of a
stack, its atom half only (``weave_atoms``): the last layer's pair update would feed nothing,
and pairs are most of the work (N² per molecule against N). ``weave_network`` stacks layers,
maps every atom through ``FC(graph_size, tanh)``, pools over atoms (sum or mean) and reads out
with an MLP (the blocks: ``weave_network.py``). With molecule features (``dataset.features``)
the MLP is torch's, over the pooled readout joined to them (``extra_features.py``).

``WeaveModel`` is the trainable model, one network for both tasks (``task`` comes from the
dataset's ``info``):

- regression: targets standardised with the training split's mean and standard deviation, a
  masked mean-squared-error loss (missing targets carry no loss), and RMSE / MAE reported in the
  targets' original units over every labelled entry (plus per target when there are several);
- classification: one sigmoid output per task, a masked binary cross-entropy (optionally each
  task's positives weighted by ``pos_weight``), and ``roc_auc`` / ``prc_auc`` (average
  precision), each the mean over the tasks that have both classes among the split's labels, as
  MoleculeNet reports them; ``nan`` when no task has (the dataset builder refuses a dev or test
  split like that, so only a tiny train sample can show it).

``WeaveRegressor`` is the same class under its former name.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from foldexp.compiler.schedule import Plan
from foldexp.executor.compiled import Compiler
from foldexp.models.extra_features import batch_features, init_features, join_features, mlp_head
from foldexp.models.scores import average_precision, roc_auc, two_classes
from foldexp.models.target_names import target_suffixes
from foldexp.models.temperature import calibrate_temperature, calibration_metrics, check_temperature
from foldexp.models.uncertainty import (
    HEAD_OUTPUTS,
    calibrate_scale,
    check_uncertainty,
    mve_statistics,
    regression_loss,
    spread_predict,
    uncertainty_metrics,
)
from foldexp.models.weave_encode import WeaveEncoder
from foldexp.models.weave_network import (
    molecule_input,
    weave_atoms,
    weave_head,
    weave_layer,
    weave_network,
)

__all__ = [
    "molecule_input",
    "weave_atoms",
    "weave_layer",
    "weave_network",
    "TASKS",
    "WeaveModel",
    "WeaveRegressor",
    "MoleculeBatch",
    "MoleculeTaskModel",
    "target_suffixes",
]

TASKS = ("regression", "classification")


@dataclass
class MoleculeBatch:
    """A collated batch: the schedule, the raw targets ``(B, T)`` and their mask."""

    plan: Plan
    targets: torch.Tensor
    mask: torch.Tensor
    size: int
    features: torch.Tensor | None = None  # (B, F) raw molecule features (dataset.features)
    # the molecules, for ``WeaveModel.encode``; left out when pickled (a DataLoader worker's
    # batch crosses to the trainer without them, as before)
    inputs: Sequence[Any] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "inputs": None}


class MoleculeTaskModel(nn.Module):
    """What every molecule model shares (``task`` comes from the dataset's ``info``): the
    masked losses, the metrics, predictions in original units. A subclass calls
    ``_init_targets`` in its constructor and defines ``collate`` (a batch with ``targets``,
    ``mask`` and ``size``) and ``_outputs(batch)`` (``(B, T)`` raw outputs: standardised targets
    or logits)."""

    def _init_targets(
        self,
        num_targets: int,
        target_mean: Sequence[float] | None,
        target_std: Sequence[float] | None,
        task: str,
        target_names: Sequence[str] | None,
        pos_weight: Sequence[float] | None,
        uncertainty: str = "none",
        evidential_weight: float = 0.2,
        temperature: str = "none",
    ) -> None:
        if task not in TASKS:
            raise ValueError(f"task must be one of {', '.join(TASKS)}, got {task!r}")
        self.task = task
        self.uncertainty = check_uncertainty(uncertainty, task)
        self.evidential_weight = float(evidential_weight)  # λ of uncertainty=evidential
        # mve: a mean and a variance a target; evidential: γ ν α β (foldexp.models.uncertainty)
        self.head_width = num_targets * HEAD_OUTPUTS[self.uncertainty]
        # classification: temperatures fitted on dev (foldexp.models.temperature)
        self.temperature_scaling = check_temperature(temperature)
        self.target_names = (
            [str(t) for t in target_names]
            if target_names is not None
            else [f"target_{k}" for k in range(num_targets)]
        )
        if len(self.target_names) != num_targets:
            raise ValueError(f"{len(self.target_names)} target_names for num_targets={num_targets}")
        self._suffixes = target_suffixes(self.target_names)
        for key, values in (("target_mean", target_mean), ("target_std", target_std),
                            ("pos_weight", pos_weight)):  # fmt: skip
            # one per target: a run folder's info says how many (a reshape would be a traceback)
            if values is not None and len(values) != num_targets:
                raise ValueError(f"{key} holds {len(values)} values for num_targets={num_targets}")
        mean = torch.zeros(num_targets) if target_mean is None else torch.tensor(target_mean)
        std = torch.ones(num_targets) if target_std is None else torch.tensor(target_std)
        # Buffers: saved in checkpoints with the weights, moved with the model.
        self.register_buffer("target_mean", mean.float().reshape(num_targets))
        self.register_buffer("target_std", std.float().reshape(num_targets))
        if task == "classification":
            weight = torch.ones(num_targets) if pos_weight is None else torch.tensor(pos_weight)
            self.register_buffer("pos_weight", weight.float().reshape(num_targets))
            if self.temperature_scaling != "none":  # set on dev after training, kept in best.pt
                self.register_buffer("temperature", torch.ones(num_targets))
        if self.uncertainty != "none":  # set on dev after training (calibrate), kept in best.pt
            self.register_buffer("calibration_scale", torch.ones(num_targets))

    def _outputs(self, batch: Any) -> torch.Tensor:
        raise NotImplementedError

    def predict(self, batch: Any) -> torch.Tensor:
        """``(B, T)``: targets in their original units, or each task's positive probability."""
        z = self._outputs(batch)
        if self.task == "classification":
            return torch.sigmoid(z / getattr(self, "temperature", 1.0))
        if self.uncertainty != "none":  # columns <target>, <target>_std
            scale = self.calibration_scale
            return spread_predict(z, self.uncertainty, self.target_mean, self.target_std, scale)
        return z * self.target_std + self.target_mean

    def prediction_columns(self) -> list[str]:
        """The columns of :meth:`predict`: ``<target>`` or ``<target>_probability``."""
        if self.task == "classification":
            return [f"{t}_probability" for t in self.target_names]
        if self.uncertainty != "none":
            return [name for t in self.target_names for name in (t, f"{t}_std")]
        return list(self.target_names)

    def calibrate(self, examples: Sequence[Any], batch_size: int) -> dict[str, Any]:
        """The training loop's optional hook, on dev: ``mve`` or ``evidential``'s calibration
        scales (``uncertainty.py``) or classification's temperatures (``temperature.py``), set
        in the model; ``{}`` when there is nothing to calibrate."""
        if hasattr(self, "temperature"):
            return calibrate_temperature(self, examples, batch_size)
        if self.uncertainty == "none":
            return {}
        return calibrate_scale(self, examples, batch_size)

    def selection(self) -> tuple[str, str]:
        """The dev metric that picks the best epoch (``trainer.select_metric=auto``)."""
        return ("roc_auc", "max") if self.task == "classification" else ("rmse", "min")

    def forward(self, batch: Any) -> dict[str, torch.Tensor]:
        """The masked loss of the task, and the statistics ``summarize`` turns into metrics."""
        z = self._outputs(batch)
        targets = batch.targets.to(z.device)
        mask = batch.mask.to(z.device)
        if self.task == "classification":
            return self._classification(z, targets, mask)
        return self._regression(z, targets, mask)

    def _regression(
        self, z: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """Masked MSE on standardised targets; squared and absolute errors in original units."""
        z_target = (targets - self.target_mean) / self.target_std
        weight = self.evidential_weight
        z, var, loss = regression_loss(z, z_target, mask, self.uncertainty, weight)
        err = torch.where(mask, (z - z_target) * self.target_std, torch.zeros_like(z)).detach()
        out = {
            **({} if var is None else mve_statistics(err, var, self.target_std, mask)),
            "loss": loss,
            "sq_error": (err**2).sum(),
            "abs_error": err.abs().sum(),
            "count": mask.sum(),
        }
        if len(self.target_names) > 1:  # per target too: scalars, summed like the rest
            for k in range(len(self.target_names)):
                out[f"sq_error_{k}"] = (err[:, k] ** 2).sum()
                out[f"abs_error_{k}"] = err[:, k].abs().sum()
                out[f"count_{k}"] = mask[:, k].sum()
        return out

    def _classification(
        self, z: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """Masked BCE over the labelled entries; per-example probabilities for the AUCs."""
        bce = F.binary_cross_entropy_with_logits(
            z, labels, pos_weight=self.pos_weight, reduction="none"
        )
        loss = torch.where(mask, bce, torch.zeros_like(bce)).sum() / mask.sum().clamp(min=1)
        # (B, T) tensors: the trainer concatenates them over the split (AUCs need them all).
        return {
            "loss": loss,
            "probability": torch.sigmoid(z).detach(),
            "logit": z.detach(),  # the temperatures' fit and ECE (foldexp.models.temperature)
            "label": labels,
            "labelled": mask,
        }

    def summarize(self, sums: Mapping[str, Any]) -> dict[str, float]:
        """Metrics over a split: RMSE and MAE in original units, or mean ROC AUC and PRC AUC."""
        if self.task == "classification":
            return {**self._auc_metrics(sums), **calibration_metrics(self, sums)}
        spread = {}
        if "residual" in sums:  # uncertainty=mve
            scale = self.calibration_scale.tolist()
            names = self._suffixes
            spread = uncertainty_metrics(
                sums["residual"], sums["sigma"], sums["labelled"], scale, names
            )
        n = max(1.0, sums.get("count", 0.0))
        metrics = {
            "rmse": (sums.get("sq_error", 0.0) / n) ** 0.5,
            "mae": sums.get("abs_error", 0.0) / n,
        }
        if len(self.target_names) > 1:
            for k, suffix in enumerate(self._suffixes):
                n_k = max(1.0, sums.get(f"count_{k}", 0.0))
                metrics[f"rmse_{suffix}"] = (sums.get(f"sq_error_{k}", 0.0) / n_k) ** 0.5
                metrics[f"mae_{suffix}"] = sums.get(f"abs_error_{k}", 0.0) / n_k
        return {**metrics, **spread}

    def _auc_metrics(self, sums: Mapping[str, Any]) -> dict[str, float]:
        """Each task over its labelled examples; means over the tasks with both classes."""
        if "probability" not in sums:
            return {"roc_auc": math.nan, "prc_auc": math.nan}
        probs = torch.as_tensor(sums["probability"]).double().numpy()
        labels = torch.as_tensor(sums["label"]).double().numpy()
        labelled = torch.as_tensor(sums["labelled"]).bool().numpy()
        per_task: dict[int, tuple[float, float]] = {}
        for k in range(len(self.target_names)):
            y, p = labels[labelled[:, k], k], probs[labelled[:, k], k]
            if two_classes(y):
                per_task[k] = (roc_auc(y, p), average_precision(y, p))
        if not per_task:  # no task has both classes: no curve exists
            return {"roc_auc": math.nan, "prc_auc": math.nan}
        metrics = {
            "roc_auc": sum(r for r, _ in per_task.values()) / len(per_task),
            "prc_auc": sum(a for _, a in per_task.values()) / len(per_task),
        }
        if len(self.target_names) > 1:
            for k, suffix in enumerate(self._suffixes):
                roc, prc = per_task.get(k, (math.nan, math.nan))
                metrics[f"roc_auc_{suffix}"] = roc
                metrics[f"prc_auc_{suffix}"] = prc
        return metrics


class WeaveModel(MoleculeTaskModel):
    """Weave graph convolution predicting molecular properties: regression or classification.

    Args:
        atom_features, pair_features, num_targets: sizes (from ``bundle.info``).
        target_mean, target_std: per-target statistics of the training split (regression); the
            network predicts standardised targets and metrics are reported in original units.
        task: ``regression`` or ``classification`` (one binary task per target).
        target_names: the targets' names (prediction columns, per-target metrics).
        pos_weight: classification: each task's weight of a positive label in the loss
            (e.g. negatives / positives on train); ``None``: 1.
        layers, atom_size, pair_size, graph_size, mlp_size, pool, dropout: see
            :func:`weave_network`.
        uncertainty, evidential_weight: ``none``, ``mve`` or ``evidential`` and its ``λ``
            (regression: ``foldexp.models.uncertainty``).
        feature_mean, feature_std, feature_clip: molecule features joined to the pooled
            readout; the MLP is then torch's, ``graph_size + F`` wide (``extra_features``).
        temperature: ``none``, ``per_task`` or ``shared`` (classification:
            ``foldexp.models.temperature``).
        init_from, freeze: a trained weave run whose network up to the pooled readout starts
            this one; ``encoder``: train the read-out MLP only (``foldexp.models.weave_encode``).
    """

    def __init__(
        self,
        atom_features: int,
        pair_features: int,
        num_targets: int = 1,
        target_mean: Sequence[float] | None = None,
        target_std: Sequence[float] | None = None,
        layers: int = 2,
        atom_size: int = 50,
        pair_size: int = 50,
        graph_size: int = 128,
        mlp_size: int = 128,
        pool: str = "sum",
        dropout: float = 0.0,
        name: str = "weave",
        task: str = "regression",
        target_names: Sequence[str] | None = None,
        pos_weight: Sequence[float] | None = None,
        uncertainty: str = "none",
        evidential_weight: float = 0.2,
        temperature: str = "none",
        feature_mean: Sequence[float] | None = None,
        feature_std: Sequence[float] | None = None,
        feature_clip: float | None = None,
        init_from: str | None = None,
        freeze: str = "none",
    ) -> None:
        super().__init__()
        self.feature_clip = feature_clip  # standardised features within ±this (None: unclipped)
        heads = (uncertainty, evidential_weight, temperature)
        self._init_targets(
            num_targets, target_mean, target_std, task, target_names, pos_weight, *heads
        )
        sizes = (layers, atom_size, pair_size, graph_size, mlp_size, pool, dropout)
        extra = init_features(self, feature_mean, feature_std)  # its MLP then torch's, below
        body = weave_network(atom_features, pair_features, self.head_width, *sizes, head=False)
        # ``body >> weave_head`` is ``weave_network(head=True)`` block for block: the same
        # parameters, the same names in best.pt (compiler.layers.<i>)
        net = body if extra else body >> weave_head(self.head_width, mlp_size, dropout)
        self.head = mlp_head(graph_size, extra, mlp_size, self.head_width, dropout)
        # Molecules are immutable and recur every epoch: trace each one once.
        self.compiler = Compiler(net, cache_traces=True)
        self.encode_size = graph_size + extra  # encode()'s width: fingerprint's columns
        self.weave_layers = layers
        # not a submodule: its layers are the compiler's own (no new names in best.pt)
        self.__dict__["_encoder"] = WeaveEncoder(self, body, init_from, freeze)

    def collate(self, molecules: Sequence[Any]) -> MoleculeBatch:
        """Traces and schedules a batch (safe to call in DataLoader workers)."""
        targets = torch.stack([torch.as_tensor(m.targets, dtype=torch.float32) for m in molecules])
        mask = torch.stack([torch.as_tensor(m.target_mask, dtype=torch.bool) for m in molecules])
        plan, features = self.compiler.build(molecules), batch_features(molecules)
        return MoleculeBatch(plan, targets, mask, len(molecules), features, list(molecules))

    def prepare_training(self, setup: Any) -> None:
        """``model.init_from``: the network up to the readout from a trained weave run."""
        self._encoder.start_from(self, setup)

    def encode(self, batch: MoleculeBatch) -> torch.Tensor:
        """``(M, encode_size)``: the read-out MLP's input, each molecule's pooled readout
        (``graph_size``) then its standardised features (``dataset.features``: ``F``)."""
        if self.head is None:  # the compiled network ends with the MLP: the readout apart
            return self._encoder.readout(batch.inputs)
        return join_features(self, self.compiler.run(batch.plan), batch.features)

    def _outputs(self, batch: MoleculeBatch) -> torch.Tensor:
        if self.head is None:
            return self.compiler.run(batch.plan)
        return self.head(self.encode(batch))


#: The former name (regression only then); the same class.
WeaveRegressor = WeaveModel
