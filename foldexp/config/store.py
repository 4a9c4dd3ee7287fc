"""Registration: every schema stored in Hydra's ConfigStore under the name its YAML files use.

A YAML file under ``foldexp/conf/<group>/`` starts from ``<name>_schema`` in its defaults list,
so an unknown key, a wrong type or a value outside an enum fails when Hydra composes the config.
"""

from __future__ import annotations

import os
import re

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from foldexp.config.dataset import (
    CalculatorDataConfig,
    MarkedSequencesDataConfig,
    MoleculeDataConfig,
    SSTDataConfig,
    SSTSentencesDataConfig,
    TextCSVDataConfig,
    TreesPTBDataConfig,
)
from foldexp.config.model import (
    AttentionModelConfig,
    CalcDecodeModelConfig,
    ChildSumTreeLSTMModelConfig,
    DMPNNModelConfig,
    SequenceLSTMModelConfig,
    TreeLSTMModelConfig,
    WeaveModelConfig,
)
from foldexp.config.run import (
    AdagradConfig,
    AdamConfig,
    DeviceConfig,
    OptimizerConfig,
    PathsConfig,
    SGDConfig,
    TrainConfig,
    TrainerConfig,
)

__all__ = ["register_configs"]

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
    cs.store(group="optimizer", name="adam_schema", node=AdamConfig)
    cs.store(group="optimizer", name="adagrad_schema", node=AdagradConfig)
    cs.store(group="optimizer", name="sgd_schema", node=SGDConfig)
    cs.store(group="dataset", name="calculator_schema", node=CalculatorDataConfig)
    cs.store(group="dataset", name="sst_schema", node=SSTDataConfig)
    cs.store(group="model", name="tree_lstm_schema", node=TreeLSTMModelConfig)
    cs.store(group="dataset", name="sst_sentences_schema", node=SSTSentencesDataConfig)
    cs.store(group="dataset", name="molecules_csv_schema", node=MoleculeDataConfig)
    cs.store(group="dataset", name="marked_sequences_schema", node=MarkedSequencesDataConfig)
    cs.store(group="model", name="seq_lstm_schema", node=SequenceLSTMModelConfig)
    cs.store(group="model", name="weave_schema", node=WeaveModelConfig)
    cs.store(group="model", name="dmpnn_schema", node=DMPNNModelConfig)
    cs.store(group="model", name="ff_attention_schema", node=AttentionModelConfig)
    cs.store(group="dataset", name="trees_ptb_schema", node=TreesPTBDataConfig)
    cs.store(group="dataset", name="text_csv_schema", node=TextCSVDataConfig)
    cs.store(group="model", name="child_sum_tree_lstm_schema", node=ChildSumTreeLSTMModelConfig)
    cs.store(group="model", name="calc_decode_schema", node=CalcDecodeModelConfig)
    # ${env:NAME,DEFAULT}: the variable, or DEFAULT when it is unset or empty (XDG_CACHE_HOME=
    # means the default, as the XDG spec says; oc.env took "" as a path: the filesystem's root)
    OmegaConf.register_new_resolver("env", _env_or_default, replace=True)
    # ${stem:PATH}: a file's name without folder and extensions (tox21.csv.gz -> tox21), as a
    # folder name: a molecule CSV's runs go under outputs/<its stem>/ (experiment/molecules_csv)
    OmegaConf.register_new_resolver("stem", _stem, replace=True)
    _registered = True


def _env_or_default(name: str, default: str | None = None) -> str | None:
    return os.environ.get(name) or default


def _stem(path: object) -> str:
    name = os.path.basename(str(path).rstrip("/\\")).split(".")[0]
    return re.sub(r"[^\w.-]+", "_", name).strip("._") or "run"
