"""Config schemas: dataclasses registered in Hydra's ConfigStore.

Every YAML file under ``foldexp/conf`` starts from one of these schemas (its defaults list names
``<group>/<name>_schema``), so an unknown key, a wrong type or a value outside an enum fails when
Hydra composes the config — before any data is loaded or any model is built.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

__all__ = ["register_configs", "CONF_DIR"]

from pathlib import Path

CONF_DIR = str(Path(__file__).parent / "conf")


class DeviceName(str, Enum):
    cpu = "cpu"
    cuda = "cuda"
    auto = "auto"


class SSTView(str, Enum):
    fine = "fine"
    binary = "binary"


class NodeLabels(str, Enum):
    all = "all"
    root = "root"


class SelectMode(str, Enum):
    max = "max"
    min = "min"


@dataclass
class DeviceConfig:
    name: DeviceName = DeviceName.cpu
    threads: int = 2


@dataclass
class PathsConfig:
    data_dir: str = MISSING
    output_dir: str = MISSING
    cache_dir: str = MISSING


@dataclass
class TrainerConfig:
    epochs: int = 10
    batch_size: int = 25
    eval_batch_size: int = 256
    max_steps: int = 0
    limit_batches: int = 0
    patience: int = 0
    select_metric: str = "dev_accuracy"
    select_mode: SelectMode = SelectMode.max
    checkpoint_every: int = 0
    resume: bool = False
    num_workers: int = 0
    grad_clip: float = 0.0
    progress: bool = True
    plots: bool = True


@dataclass
class OptimizerConfig:
    _target_: str = MISSING
    _partial_: bool = True
    lr: float = 0.001
    weight_decay: float = 0.0


@dataclass
class CalculatorDataConfig:
    _target_: str = "foldexp.train.datasets.calculator"
    name: str = "calculator"
    n: int = 3000
    max_depth: int = 3
    n_classes: int = 10
    leaf_prob: float = 0.3
    seed: int = 0


@dataclass
class SSTDataConfig:
    _target_: str = "foldexp.train.datasets.sst"
    name: str = "sst"
    data_dir: str = "${paths.data_dir}"
    view: SSTView = SSTView.fine
    labels: NodeLabels = NodeLabels.all
    lowercase: bool = False
    min_count: int = 1
    word_vectors: str | None = None
    limit: int = 0


@dataclass
class TreeLSTMModelConfig:
    _target_: str = "foldexp.models.tree_lstm.TreeLSTMClassifier"
    name: str = "tree_lstm"
    embed_size: int = 64
    hidden_size: int = 64
    dropout: float = 0.0
    freeze_embeddings: bool = False
    node_loss: bool = True


@dataclass
class TrainConfig:
    seed: int = 0
    task_name: str = "train"
    dataset: Any = MISSING
    model: Any = MISSING
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    device: DeviceConfig = field(default_factory=DeviceConfig)
    paths: PathsConfig = field(default_factory=PathsConfig)


_registered = False


def register_configs() -> None:
    """Registers every schema (idempotent); called before Hydra composes anything."""
    global _registered
    if _registered:
        return
    cs = ConfigStore.instance()
    cs.store(name="train_schema", node=TrainConfig)
    cs.store(group="device", name="device_schema", node=DeviceConfig)
    cs.store(group="paths", name="paths_schema", node=PathsConfig)
    cs.store(group="trainer", name="trainer_schema", node=TrainerConfig)
    cs.store(group="optimizer", name="optimizer_schema", node=OptimizerConfig)
    cs.store(group="dataset", name="calculator_schema", node=CalculatorDataConfig)
    cs.store(group="dataset", name="sst_schema", node=SSTDataConfig)
    cs.store(group="model", name="tree_lstm_schema", node=TreeLSTMModelConfig)
    _registered = True
