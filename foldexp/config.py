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


class EmbeddingOptimizer(str, Enum):
    sgd = "sgd"


class SelectMode(str, Enum):
    max = "max"
    min = "min"


@dataclass
class DeviceConfig:
    name: DeviceName = DeviceName.cpu
    threads: int = 2
    onednn: bool = True
    keep_memory: bool = True


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
    ema_decay: float = 0.0
    progress: bool = True
    plots: bool = True
    strategy: str = "single"  # single | ddp (checked by run_train before any work)
    processes: int = 1
    balance: str = "nodes"  # nodes | examples
    find_unused_parameters: bool = True


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
    vector_vocab: bool = False
    neutral_nodes: bool = False
    limit: int = 0


@dataclass
class TreeLSTMModelConfig:
    _target_: str = "foldexp.models.tree_lstm.TreeLSTMClassifier"
    name: str = "tree_lstm"
    embed_size: int = 64
    hidden_size: int = 64
    dropout: float = 0.0
    embedding_dropout: float | None = None
    freeze_embeddings: bool = False
    node_loss: bool = True
    embedding_lr: float | None = None
    embedding_weight_decay: float | None = None
    embedding_optimizer: EmbeddingOptimizer | None = None
    recurrent_dropout: float = 0.0
    forget_bias: float = 0.0
    word_dropout: float = 0.0
    root_loss_weight: float = 0.0
    leaf_context_size: int = 0
    static_vectors: bool = False
    label_smoothing: float = 0.0
    teacher: list[str] | None = None
    distill_weight: float = 0.5


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
    cs.store(group="dataset", name="sst_sentences_schema", node=SSTSentencesDataConfig)
    cs.store(group="dataset", name="molecules_schema", node=MoleculeDataConfig)
    cs.store(group="dataset", name="marked_sequences_schema", node=MarkedSequencesDataConfig)
    cs.store(group="model", name="seq_lstm_schema", node=SequenceLSTMModelConfig)
    cs.store(group="model", name="weave_schema", node=WeaveModelConfig)
    cs.store(group="model", name="ff_attention_schema", node=AttentionModelConfig)
    _registered = True


# ---------------------------------------------------------------------- sequence LSTM, weave and
# feed-forward attention experiments (registered in register_configs above)


class MoleculeSet(str, Enum):
    esol = "esol"
    freesolv = "freesolv"


class MoleculeSplit(str, Enum):
    random = "random"
    scaffold = "scaffold"


class MarkedProblem(str, Enum):
    addition = "addition"
    multiplication = "multiplication"


class Pooling(str, Enum):
    sum = "sum"
    mean = "mean"


class AttentionScore(str, Enum):
    tanh = "tanh"
    linear = "linear"


@dataclass
class SSTSentencesDataConfig:
    _target_: str = "foldexp.train.datasets.sst_sentences"
    name: str = "sst_sentences"
    data_dir: str = "${paths.data_dir}"
    view: SSTView = SSTView.fine
    lowercase: bool = False
    min_count: int = 1
    word_vectors: str | None = None
    limit: int = 0


@dataclass
class MoleculeDataConfig:
    _target_: str = "foldexp.train.datasets.molecules"
    name: str = "esol"
    source: MoleculeSet = MoleculeSet.esol
    data_dir: str = "${paths.data_dir}"
    cache_dir: str | None = "${paths.cache_dir}"
    split: MoleculeSplit = MoleculeSplit.random
    fractions: list[float] = field(default_factory=lambda: [0.8, 0.1, 0.1])
    seed: int = 0
    limit: int = 0


@dataclass
class MarkedSequencesDataConfig:
    _target_: str = "foldexp.train.datasets.marked_sequences"
    name: str = "addition"
    problem: MarkedProblem = MarkedProblem.addition
    n_train: int = 10000
    n_dev: int = 1000
    n_test: int = 1000
    min_len: int = 50
    max_len: int = 100
    seed: int = 0


@dataclass
class SequenceLSTMModelConfig:
    _target_: str = "foldexp.models.sequence.SequenceLSTMClassifier"
    name: str = "seq_lstm"
    embed_size: int = 64
    hidden_size: int = 64
    dropout: float = 0.0
    freeze_embeddings: bool = False


@dataclass
class WeaveModelConfig:
    _target_: str = "foldexp.models.weave.WeaveRegressor"
    name: str = "weave"
    layers: int = 2
    atom_size: int = 50
    pair_size: int = 50
    graph_size: int = 128
    mlp_size: int = 128
    pool: Pooling = Pooling.sum
    dropout: float = 0.0


@dataclass
class AttentionModelConfig:
    _target_: str = "foldexp.models.attention.AttentionRegressor"
    name: str = "ff_attention"
    hidden_size: int = 100
    score: AttentionScore = AttentionScore.tanh
    dropout: float = 0.0
    tolerance: float = 0.04
