"""Config schemas: dataclasses registered in Hydra's ConfigStore, the one home of every default.

Every YAML file under ``foldexp/conf`` starts from one of these schemas (its defaults list names
``<group>/<name>_schema``) and holds ``_target_`` and only what differs from it, so an unknown
key, a wrong type or a value outside an enum fails when Hydra composes the config — before any
data is loaded or any model is built. The modules mirror the config groups:

- ``run``: ``device``, ``paths``, ``trainer``, ``optimizer``, ``logger`` and ``TrainConfig``;
- ``dataset``: one schema per dataset builder; ``model``: one per model class;
- ``fields``: valid ranges of numeric settings, and ``enum_value`` (a choice as a plain string);
- ``store``: ``register_configs``, which puts them in the ConfigStore.

Beside the schemas, imported by name (not re-exported here): ``checks`` (a composed or stored
config's values against them), ``targets`` (the registry of targets a config may build),
``overrides`` (what the command line's overrides may do), ``errors`` (``ConfigError``) and
``settings`` (the composed config, checked, as frozen typed settings: ``run_settings``, made
once at a command's edge and passed down; each settings class is its schema, frozen).
"""

from __future__ import annotations

from pathlib import Path

from foldexp.config.dataset import (
    CalculatorDataConfig,
    MarkedProblem,
    MarkedSequencesDataConfig,
    MoleculeDataConfig,
    MoleculeSplit,
    MoleculeTask,
    NodeLabels,
    OnInvalid,
    SSTDataConfig,
    SSTSentencesDataConfig,
    SSTView,
    TextCSVDataConfig,
    TextSplit,
    Tokenizer,
    TreeSplit,
    TreesPTBDataConfig,
)
from foldexp.config.fields import (
    FLOAT32_MAX,
    FLOAT32_TINY,
    MAX_CLASSES,
    MAX_GENERATED,
    MAX_LAYERS,
    MAX_LR,
    MAX_SEED,
    MAX_SEQUENCE_LENGTH,
    MAX_WEIGHT_DECAY,
    MAX_WIDTH,
    Range,
    decay,
    enum_value,
    existing_file,
    is_finite,
    learning_rate,
    non_negative,
    positive,
    probability,
    ranged,
    rng_seed,
    width,
)
from foldexp.config.model import (
    AttentionModelConfig,
    AttentionScore,
    CalcDecodeModelConfig,
    ChildSumTreeLSTMModelConfig,
    DMPNNModelConfig,
    EmbeddingOptimizer,
    Pooling,
    SequenceLSTMModelConfig,
    TreeLSTMModelConfig,
    WeaveModelConfig,
)
from foldexp.config.run import (
    MAX_EPS,
    AdagradConfig,
    AdamConfig,
    Balance,
    CsvLoggerConfig,
    DeviceConfig,
    DeviceName,
    LoggerConfig,
    LRSchedule,
    OptimizerConfig,
    PathsConfig,
    SelectMode,
    SGDConfig,
    Strategy,
    TensorBoardLoggerConfig,
    TrainConfig,
    TrainerConfig,
)
from foldexp.config.store import register_configs

CONF_DIR = str(Path(__file__).parent.parent / "conf")  # foldexp/conf: the YAML config groups

__all__ = [
    "CONF_DIR",
    "FLOAT32_MAX",
    "FLOAT32_TINY",
    "MAX_CLASSES",
    "MAX_EPS",
    "MAX_GENERATED",
    "MAX_LAYERS",
    "MAX_LR",
    "MAX_SEED",
    "MAX_SEQUENCE_LENGTH",
    "MAX_WEIGHT_DECAY",
    "MAX_WIDTH",
    "AdagradConfig",
    "AdamConfig",
    "AttentionModelConfig",
    "AttentionScore",
    "Balance",
    "CalculatorDataConfig",
    "CalcDecodeModelConfig",
    "ChildSumTreeLSTMModelConfig",
    "CsvLoggerConfig",
    "DeviceConfig",
    "DeviceName",
    "EmbeddingOptimizer",
    "LRSchedule",
    "LoggerConfig",
    "MarkedProblem",
    "MarkedSequencesDataConfig",
    "MoleculeDataConfig",
    "MoleculeSplit",
    "MoleculeTask",
    "NodeLabels",
    "OnInvalid",
    "OptimizerConfig",
    "PathsConfig",
    "Pooling",
    "Range",
    "SGDConfig",
    "SSTDataConfig",
    "SSTSentencesDataConfig",
    "SSTView",
    "SelectMode",
    "SequenceLSTMModelConfig",
    "Strategy",
    "TensorBoardLoggerConfig",
    "TextCSVDataConfig",
    "TextSplit",
    "Tokenizer",
    "TrainConfig",
    "TrainerConfig",
    "TreeLSTMModelConfig",
    "TreeSplit",
    "TreesPTBDataConfig",
    "WeaveModelConfig",
    "DMPNNModelConfig",
    "decay",
    "enum_value",
    "existing_file",
    "is_finite",
    "learning_rate",
    "non_negative",
    "positive",
    "probability",
    "ranged",
    "register_configs",
    "rng_seed",
    "width",
]
