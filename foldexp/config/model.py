"""Schemas of the ``model`` group (``foldexp/conf/model/``): one per model class.

Every default lives here, once; ``conf/model/<name>.yaml`` names its schema and holds
``_target_`` and what differs. A model of one's own (``model=custom``) has no schema: its
constructor's signature is checked instead (``foldexp.config.checks``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from omegaconf import MISSING

from foldexp.config.fields import (
    MAX_LAYERS,
    a_path,
    decay,
    learning_rate,
    positive,
    probability,
    ranged,
    width,
)

__all__ = [
    "AttentionModelConfig",
    "AttentionScore",
    "CalcDecodeModelConfig",
    "ChildSumTreeLSTMModelConfig",
    "DMPNNModelConfig",
    "EmbeddingOptimizer",
    "Freeze",
    "Pooling",
    "SequenceLSTMModelConfig",
    "Temperature",
    "TreeLSTMModelConfig",
    "Uncertainty",
    "WeaveModelConfig",
]


class EmbeddingOptimizer(str, Enum):
    sgd = "sgd"


class Pooling(str, Enum):
    sum = "sum"
    mean = "mean"


class Uncertainty(str, Enum):
    none = "none"  # point predictions
    mve = "mve"  # mean-variance head, Gaussian NLL (regression; foldexp.models.uncertainty)
    evidential = "evidential"  # NIG head, evidential loss (regression; foldexp.models.evidential)


class Temperature(str, Enum):
    none = "none"  # the classifier's probabilities as trained
    per_task = "per_task"  # one temperature a task, fitted on dev (foldexp.models.temperature)
    shared = "shared"  # one temperature for all tasks


class Freeze(str, Enum):
    none = "none"  # train every weight
    encoder = "encoder"  # train the head only (with init_from)


class AttentionScore(str, Enum):
    tanh = "tanh"
    linear = "linear"


@dataclass
class _TreeLSTMFields:
    """What the binary and the child-sum Tree-LSTM classifiers share."""

    _target_: str = MISSING  # the model class
    name: str = MISSING  # shown in results
    embed_size: int = width(64)  # word embedding size (overridden by pretrained vectors' size)
    hidden_size: int = width(64)  # Tree-LSTM state size
    # dropout on embeddings and on the states fed to the classifier
    dropout: float = probability(0.0)
    # dropout on embeddings instead (null: dropout)
    embedding_dropout: float | None = probability(None, none_ok=True)
    freeze_embeddings: bool = False  # keep pretrained embeddings fixed
    node_loss: bool = True  # loss on every labelled node (false: root only)
    # learning rate of the word table (null: optimizer.lr); bounded as optimizer.lr
    embedding_lr: float | None = learning_rate(None, none_ok=True)
    # weight decay of the word table (null: the optimizer's); bounded as optimizer.weight_decay
    embedding_weight_decay: float | None = decay(None, none_ok=True)
    # sgd: plain SGD for the word table at embedding_lr (Tai et al.); null: the main optimizer
    embedding_optimizer: EmbeddingOptimizer | None = None
    # dropout on each cell's candidate update tanh(u) (Semeniuta et al. 2016; Fold paper §3.5.1)
    recurrent_dropout: float = probability(0.0)
    # initial bias of the forget gates (Jozefowicz et al. 2015 suggest 1; chrono initialisation
    # reaches ~7); beyond ±100 the sigmoid is 0 or 1 to float precision whatever the input
    forget_bias: float = ranged(0.0, ge=-100, le=100)


@dataclass
class TreeLSTMModelConfig(_TreeLSTMFields):
    _target_: str = "foldexp.models.tree_lstm.TreeLSTMClassifier"
    name: str = "tree_lstm"
    # [DIR, ...]: run/sweep folders whose models' averaged node probabilities are soft
    # targets (distillation)
    teacher: list[str] | None = None
    # with a teacher: the soft targets' share of the training loss
    distill_weight: float = ranged(0.5, ge=0, le=1)


@dataclass
class CalcDecodeModelConfig:
    _target_: str = "foldexp.models.calc_decode.CalcDecoder"  # the model class
    name: str = "calc_decode"  # shown in results
    embed_size: int = width(64)  # word and token embedding size
    hidden_size: int = width(64)  # state size of the Tree-LSTM encoder and the LSTM decoder
    # the most tokens greedy decoding emits, the end token included (a value's digits and sign
    # take fewer: depth 3 reaches 8 digits, depth 4 about 16)
    max_length: int = ranged(24, ge=2, le=1000)


@dataclass
class ChildSumTreeLSTMModelConfig(_TreeLSTMFields):
    _target_: str = "foldexp.models.child_sum.ChildSumTreeLSTMClassifier"
    name: str = "child_sum_tree_lstm"


@dataclass
class SequenceLSTMModelConfig:
    _target_: str = "foldexp.models.sequence.SequenceLSTMClassifier"  # the model class
    name: str = "seq_lstm"  # shown in results
    embed_size: int = width(64)  # word embedding size (overridden by pretrained vectors' size)
    hidden_size: int = width(64)  # LSTM state size
    # dropout on embeddings and on the final state fed to the classifier
    dropout: float = probability(0.0)
    freeze_embeddings: bool = False  # keep pretrained embeddings fixed


@dataclass
class WeaveModelConfig:
    # the model class (regression or classification: the dataset says)
    _target_: str = "foldexp.models.weave.WeaveModel"
    name: str = "weave"  # shown in results
    # stacked weave modules (the last updates atoms only)
    layers: int = ranged(2, gt=0, le=MAX_LAYERS)
    atom_size: int = width(50)  # atom state size of every weave module
    pair_size: int = width(50)  # pair state size of every weave module
    graph_size: int = width(128)  # per-atom FC (tanh) width before pooling
    mlp_size: int = width(128)  # hidden width of the read-out MLP after pooling
    pool: Pooling = Pooling.sum  # sum | mean over a molecule's atoms
    dropout: float = probability(0.0)  # dropout on the pooled vector and the MLP's hidden layer
    # none | mve | evidential: a spread beside each regression target (predict writes
    # <target>_std), calibrated on dev after training
    uncertainty: Uncertainty = Uncertainty.none
    # λ of uncertainty=evidential: weight of the evidence regulariser (chemprop v2: 0.2)
    evidential_weight: float = ranged(0.2, ge=0, le=10)
    # classification: none | per_task | shared temperature(s) fitted on dev after training,
    # applied by predict and eval
    temperature: Temperature = Temperature.per_task
    # a trained weave run's folder: its network up to the pooled readout starts this run's;
    # the read-out MLP is new (foldexp.models.weave_encode)
    init_from: str | None = a_path(None)
    freeze: Freeze = Freeze.none  # none | encoder: train the read-out MLP only (needs init_from)


@dataclass
class DMPNNModelConfig:
    """``model=dmpnn``: chemprop's directed message passing (``foldexp.models.dmpnn``)."""

    # the model class (regression or classification: the dataset says)
    _target_: str = "foldexp.models.dmpnn.DMPNNModel"
    name: str = "dmpnn"  # shown in results
    hidden_size: int = width(300)  # bond and atom state width (chemprop's default)
    depth: int = ranged(3, gt=0, le=MAX_LAYERS)  # message-passing steps, the first included
    ffn_layers: int = ranged(2, gt=0, le=MAX_LAYERS)  # read-out layers after the sum over atoms
    dropout: float = probability(0.0)  # on bond and atom states and the read-out's inputs
    # none | mve | evidential: a spread beside each regression target (predict writes
    # <target>_std), calibrated on dev after training
    uncertainty: Uncertainty = Uncertainty.none
    # λ of uncertainty=evidential: weight of the evidence regulariser (chemprop v2: 0.2)
    evidential_weight: float = ranged(0.2, ge=0, le=10)
    # classification: none | per_task | shared temperature(s) fitted on dev after training,
    # applied by predict and eval
    temperature: Temperature = Temperature.per_task
    # a trained D-MPNN run's folder: its encoder (message passing) starts this run's; the head
    # is new (foldexp.models.transfer)
    init_from: str | None = a_path(None)
    freeze: Freeze = Freeze.none  # none | encoder: train the head only (needs init_from)
    # with dataset.smiles_column=[a, b]: one encoder for every column (true) or one a column
    # (false, chemprop's default); the readouts are concatenated before the head
    shared_encoder: bool = False


@dataclass
class AttentionModelConfig:
    _target_: str = "foldexp.models.attention.AttentionRegressor"  # the model class
    name: str = "ff_attention"  # shown in results
    hidden_size: int = width(100)  # FC width before and after the attention
    # tanh (Raffel & Ellis's a(h)) | linear (unbounded, clamped) scores
    score: AttentionScore = AttentionScore.tanh
    dropout: float = probability(0.0)  # dropout on the attention's output
    tolerance: float = positive(0.04)  # a prediction this close to the target counts as correct
