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


@dataclass(frozen=True)
class Range:
    """The valid interval of a numeric config value (bounds ``None`` are open)."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None

    def allows(self, value: float) -> bool:
        return not (
            (self.ge is not None and value < self.ge)
            or (self.gt is not None and value <= self.gt)
            or (self.le is not None and value > self.le)
            or (self.lt is not None and value >= self.lt)
        )

    def describe(self) -> str:
        """E.g. ``a value > 0``, ``0 <= value < 1``."""
        low = (
            f"{self.ge} <= "
            if self.ge is not None
            else f"{self.gt} < "
            if self.gt is not None
            else ""
        )
        high = (
            f" <= {self.le}"
            if self.le is not None
            else f" < {self.lt}"
            if self.lt is not None
            else ""
        )
        if low and not high:  # one bound reads better with the value first
            return f"a value {'>=' if self.ge is not None else '>'} {low.split()[0]}"
        return f"{low}value{high}"


def ranged(default: Any, *, ge=None, gt=None, le=None, lt=None, none_ok: bool = False) -> Any:
    """A schema field whose numeric value (or every element of a list value) must lie in the
    range; ``foldexp.validate.check_config`` enforces it when the config is composed."""
    meta = {"range": Range(ge, gt, le, lt), "none_ok": none_ok}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)


def positive(default: Any) -> Any:
    """> 0 (an integer key: >= 1)."""
    return ranged(default, gt=0)


def non_negative(default: Any) -> Any:
    """>= 0 (for most such keys 0 turns the feature off)."""
    return ranged(default, ge=0)


def probability(default: Any, none_ok: bool = False) -> Any:
    """0 <= p < 1 (a dropout rate, a mixing weight)."""
    return ranged(default, ge=0, lt=1, none_ok=none_ok)


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


class Strategy(str, Enum):
    single = "single"
    ddp = "ddp"


class Balance(str, Enum):
    nodes = "nodes"
    examples = "examples"


@dataclass
class DeviceConfig:
    name: DeviceName = DeviceName.cpu
    threads: int = non_negative(2)
    onednn: bool = True
    keep_memory: bool = True


@dataclass
class PathsConfig:
    data_dir: str = MISSING
    output_dir: str = MISSING
    cache_dir: str = MISSING


@dataclass
class TrainerConfig:
    epochs: int = positive(10)
    batch_size: int = positive(25)
    eval_batch_size: int = positive(256)
    max_steps: int = non_negative(0)
    limit_batches: int = non_negative(0)
    patience: int = non_negative(0)
    select_metric: str = "dev_accuracy"  # a metrics.csv column: checked before the first step
    select_mode: SelectMode = SelectMode.max
    checkpoint_every: int = non_negative(0)
    resume: bool = False
    overwrite: bool = False
    num_workers: int = non_negative(0)
    grad_clip: float = non_negative(0.0)
    ema_decay: float = probability(0.0)
    progress: bool = True
    plots: bool = True
    strategy: Strategy = Strategy.single
    processes: int = positive(1)
    balance: Balance = Balance.nodes
    find_unused_parameters: bool = True
    log_every_s: float = non_negative(30.0)


@dataclass
class OptimizerConfig:
    _target_: str = MISSING
    _partial_: bool = True
    lr: float = positive(0.001)
    weight_decay: float = non_negative(0.0)


@dataclass
class CalculatorDataConfig:
    _target_: str = "foldexp.experiments.datasets.calculator"
    name: str = "calculator"
    n: int = ranged(3000, ge=3)  # one expression at least in each split
    max_depth: int = positive(3)
    n_classes: int = ranged(10, ge=2)
    leaf_prob: float = ranged(0.3, ge=0, le=1)
    seed: int = non_negative(0)


@dataclass
class SSTDataConfig:
    _target_: str = "foldexp.experiments.datasets.sst"
    name: str = "sst"
    data_dir: str = "${paths.data_dir}"
    view: SSTView = SSTView.fine
    labels: NodeLabels = NodeLabels.all
    lowercase: bool = False
    min_count: int = positive(1)
    word_vectors: str | None = None
    vector_vocab: bool = False
    neutral_nodes: bool = False
    limit: int = non_negative(0)


@dataclass
class TreeLSTMModelConfig:
    _target_: str = "foldexp.models.tree_lstm.TreeLSTMClassifier"
    name: str = "tree_lstm"
    embed_size: int = positive(64)
    hidden_size: int = positive(64)
    dropout: float = probability(0.0)
    embedding_dropout: float | None = probability(None, none_ok=True)
    freeze_embeddings: bool = False
    node_loss: bool = True
    embedding_lr: float | None = ranged(None, gt=0, none_ok=True)
    embedding_weight_decay: float | None = ranged(None, ge=0, none_ok=True)
    embedding_optimizer: EmbeddingOptimizer | None = None
    recurrent_dropout: float = probability(0.0)
    forget_bias: float = 0.0
    word_dropout: float = probability(0.0)
    root_loss_weight: float = non_negative(0.0)
    leaf_context_size: int = non_negative(0)
    static_vectors: bool = False
    label_smoothing: float = probability(0.0)
    teacher: list[str] | None = None
    distill_weight: float = ranged(0.5, ge=0, le=1)


@dataclass
class CsvLoggerConfig:
    """``metrics.csv`` and its plots; no options of its own (``trainer.plots`` draws)."""


@dataclass
class TensorBoardLoggerConfig:
    log_every_n_steps: int = positive(10)


@dataclass
class LoggerConfig:
    csv: CsvLoggerConfig | None = None
    tensorboard: TensorBoardLoggerConfig | None = None


@dataclass
class TrainConfig:
    seed: int = non_negative(0)
    task_name: str = "train"
    dataset: Any = MISSING
    model: Any = MISSING
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    device: DeviceConfig = field(default_factory=DeviceConfig)
    paths: PathsConfig = field(default_factory=PathsConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)


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
    cs.store(group="dataset", name="molecules_csv_schema", node=MoleculeDataConfig)
    cs.store(group="dataset", name="marked_sequences_schema", node=MarkedSequencesDataConfig)
    cs.store(group="model", name="seq_lstm_schema", node=SequenceLSTMModelConfig)
    cs.store(group="model", name="weave_schema", node=WeaveModelConfig)
    cs.store(group="model", name="ff_attention_schema", node=AttentionModelConfig)
    cs.store(group="dataset", name="trees_ptb_schema", node=TreesPTBDataConfig)
    cs.store(group="dataset", name="text_csv_schema", node=TextCSVDataConfig)
    cs.store(group="model", name="child_sum_tree_lstm_schema", node=ChildSumTreeLSTMModelConfig)
    _registered = True


# ---------------------------------------------------------------------- sequence LSTM, weave and
# feed-forward attention experiments (registered in register_configs above)


class MoleculeTask(str, Enum):
    regression = "regression"
    classification = "classification"


class OnInvalid(str, Enum):
    error = "error"
    skip = "skip"


class MoleculeSplit(str, Enum):
    random = "random"
    scaffold = "scaffold"
    column = "column"


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
    _target_: str = "foldexp.experiments.datasets.sst_sentences"
    name: str = "sst_sentences"
    data_dir: str = "${paths.data_dir}"
    view: SSTView = SSTView.fine
    lowercase: bool = False
    min_count: int = positive(1)
    word_vectors: str | None = None
    limit: int = non_negative(0)


@dataclass
class MoleculeDataConfig:
    """``molecules_csv``: any molecule CSV (ESOL and FreeSolv are presets of it)."""

    _target_: str = "foldexp.experiments.molecule_data.molecules_csv"
    name: str = "molecules_csv"
    path: str = MISSING  # the CSV or CSV.gz file
    smiles_column: str = "smiles"
    targets: list[str] = MISSING  # one column per target
    task: MoleculeTask = MoleculeTask.regression
    on_invalid: OnInvalid = OnInvalid.error
    split: MoleculeSplit = MoleculeSplit.random
    split_column: str | None = None  # split=column: train / valid (dev) / test per row
    fractions: list[float] = ranged([0.8, 0.1, 0.1], ge=0, le=1)
    seed: int = non_negative(0)
    limit: int = non_negative(0)
    cache_dir: str | None = "${paths.cache_dir}"
    balance: bool = False  # classification: weight positives by negatives / positives on train


@dataclass
class MarkedSequencesDataConfig:
    _target_: str = "foldexp.experiments.datasets.marked_sequences"
    name: str = "addition"
    problem: MarkedProblem = MarkedProblem.addition
    n_train: int = positive(10000)
    n_dev: int = positive(1000)
    n_test: int = positive(1000)
    min_len: int = ranged(50, ge=2)  # two marked values at least
    max_len: int = ranged(100, ge=2)
    seed: int = non_negative(0)


@dataclass
class SequenceLSTMModelConfig:
    _target_: str = "foldexp.models.sequence.SequenceLSTMClassifier"
    name: str = "seq_lstm"
    embed_size: int = positive(64)
    hidden_size: int = positive(64)
    dropout: float = probability(0.0)
    freeze_embeddings: bool = False


@dataclass
class WeaveModelConfig:
    _target_: str = "foldexp.models.weave.WeaveModel"
    name: str = "weave"
    layers: int = positive(2)
    atom_size: int = positive(50)
    pair_size: int = positive(50)
    graph_size: int = positive(128)
    mlp_size: int = positive(128)
    pool: Pooling = Pooling.sum
    dropout: float = probability(0.0)


@dataclass
class AttentionModelConfig:
    _target_: str = "foldexp.models.attention.AttentionRegressor"
    name: str = "ff_attention"
    hidden_size: int = positive(100)
    score: AttentionScore = AttentionScore.tanh
    dropout: float = probability(0.0)
    tolerance: float = positive(0.04)


# ---------------------------------------------------------------------- trees and texts of one's
# own: trees_ptb, text_csv and the child-sum Tree-LSTM (registered in register_configs above)


class TreeSplit(str, Enum):
    files = "files"  # dataset.path is a folder with train/dev/test files
    random = "random"  # dataset.path is one file, split by dataset.fractions and dataset.seed


class TextSplit(str, Enum):
    random = "random"
    column = "column"


class Tokenizer(str, Enum):
    whitespace = "whitespace"
    chars = "chars"


@dataclass
class TreesPTBDataConfig:
    """``trees_ptb``: PTB-format trees with integer labels (``foldexp.experiments.tree_data``)."""

    _target_: str = "foldexp.experiments.tree_data.trees_ptb"
    name: str = "trees_ptb"
    path: str = MISSING  # a folder with the three files, or one file (split=random)
    train_file: str = "train.txt"
    dev_file: str = "dev.txt"
    test_file: str = "test.txt"
    split: TreeSplit = TreeSplit.files
    fractions: list[float] = ranged([0.8, 0.1, 0.1], ge=0, le=1)
    seed: int = non_negative(0)
    num_classes: int | None = ranged(None, ge=2, none_ok=True)  # null: largest train label + 1
    label_map: list[int] | None = ranged(None, ge=-1, none_ok=True)  # file label -> class id
    drop_unscored_roots: bool = False
    predict_classes: int | None = ranged(None, ge=2, none_ok=True)
    polarity: list[list[int]] | None = ranged(None, ge=0, none_ok=True)  # [[neg], [pos]] classes
    class_names: list[str] | None = None
    labels: NodeLabels = NodeLabels.all
    collapse_unary: bool = False
    lowercase: bool = False
    min_count: int = positive(1)
    word_vectors: str | None = None
    vector_vocab: bool = False
    limit: int = non_negative(0)


@dataclass
class TextCSVDataConfig:
    """``text_csv``: sentence classification from a CSV (``foldexp.experiments.text_data``)."""

    _target_: str = "foldexp.experiments.text_data.text_csv"
    name: str = "text_csv"
    path: str = MISSING  # the CSV or CSV.gz file
    text_column: str = "text"
    label_column: str = "label"
    tokenizer: Tokenizer = Tokenizer.whitespace
    lowercase: bool = False
    min_count: int = positive(1)
    word_vectors: str | None = None
    split: TextSplit = TextSplit.random
    split_column: str = "split"  # split=column: train / valid or dev / test per row
    fractions: list[float] = ranged([0.8, 0.1, 0.1], ge=0, le=1)
    seed: int = non_negative(0)
    on_invalid: OnInvalid = OnInvalid.error
    limit: int = non_negative(0)


@dataclass
class ChildSumTreeLSTMModelConfig:
    _target_: str = "foldexp.models.child_sum.ChildSumTreeLSTMClassifier"
    name: str = "child_sum_tree_lstm"
    embed_size: int = positive(64)
    hidden_size: int = positive(64)
    dropout: float = probability(0.0)
    embedding_dropout: float | None = probability(None, none_ok=True)
    freeze_embeddings: bool = False
    node_loss: bool = True
    embedding_lr: float | None = ranged(None, gt=0, none_ok=True)
    embedding_weight_decay: float | None = ranged(None, ge=0, none_ok=True)
    embedding_optimizer: EmbeddingOptimizer | None = None
    recurrent_dropout: float = probability(0.0)
    forget_bias: float = 0.0  # any real number is a valid initial bias (as tree_lstm's)
    word_dropout: float = probability(0.0)
    root_loss_weight: float = non_negative(0.0)
    static_vectors: bool = False
    label_smoothing: float = probability(0.0)
