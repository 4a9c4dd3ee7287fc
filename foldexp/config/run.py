"""Schemas of a run's own settings: the groups ``device``, ``paths``, ``trainer``, ``optimizer``
and ``logger`` (``foldexp/conf/<group>/``), and ``TrainConfig``, the whole training config.

Every default lives here, once; a YAML file under ``foldexp/conf`` names its schema in its
defaults list and holds only what differs from it. ``foldexp train --cfg job`` prints the result.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from omegaconf import MISSING

from foldexp.config.fields import (
    FLOAT32_TINY,
    MAX_BATCH_SIZE,
    MAX_EPOCHS,
    MAX_STEPS,
    count,
    decay,
    learning_rate,
    non_negative,
    probability,
    ranged,
    rng_seed,
)

__all__ = [
    "MAX_EPS",
    "MAX_PROCESSES",
    "MAX_THREADS",
    "MAX_WORKERS",
    "AdagradConfig",
    "AdamConfig",
    "Balance",
    "CsvLoggerConfig",
    "DeviceConfig",
    "CompileMode",
    "DeviceName",
    "LRSchedule",
    "LoggerConfig",
    "OptimizerConfig",
    "PathsConfig",
    "SGDConfig",
    "SelectMode",
    "Strategy",
    "TensorBoardLoggerConfig",
    "TrainConfig",
    "TrainerConfig",
]


class DeviceName(str, Enum):
    cpu = "cpu"
    cuda = "cuda"
    auto = "auto"


class CompileMode(str, Enum):
    off = "off"
    graphs = "graphs"
    inductor = "inductor"


class SelectMode(str, Enum):
    max = "max"
    min = "min"


class Strategy(str, Enum):
    single = "single"
    ddp = "ddp"


class Balance(str, Enum):
    nodes = "nodes"
    examples = "examples"


class LRSchedule(str, Enum):
    constant = "constant"
    linear = "linear"
    cosine = "cosine"


#: Most intra-op threads a run may ask for: more than any CPU's cores today. Each OpenMP thread
#: maps a stack of its own, so 100000 of them failed in mapping memory (an ImportError from a
#: shared library, or a MemoryError) instead of running.
MAX_THREADS = 1024
#: Most DataLoader workers: each is a process with its own copy of the model's tracer, and a
#: batch schedule takes milliseconds to build, so a handful keep up with training; 1000 of them
#: were accepted and crawled.
MAX_WORKERS = 64
#: Most local DDP processes: the cores of the largest single machines (two 128-core CPUs). Each
#: process imports torch and holds a copy of the model and its data (about 0.5 GB at least), and
#: 100000 of them were accepted and spawned until the machine stopped answering.
MAX_PROCESSES = 256


@dataclass
class DeviceConfig:
    name: DeviceName = DeviceName.cpu  # cpu | cuda | auto
    # torch intra-op threads: null = chosen from the CPUs this process may use and the step's
    # size, never the load (foldexp/cpus.py; a resume keeps the run's); else this many
    threads: int | None = ranged(None, ge=1, le=MAX_THREADS, none_ok=True)
    # CPU float32 dense layers through oneDNN (foldexp/kernels/dense.py): null = where it pays
    # (AMD CPUs of family 26 on, whose full-width AVX-512 MKL leaves half idle); true / false
    # force it
    onednn: bool | None = None
    # foldexp's C++ code: Tree-LSTM state updates (kernels/treelstm.py), dropout noise drawn
    # exactly as torch draws it (kernels/dropout_noise.py), tracing of the common blocks
    # (compiler/native_trace.py). null = where it builds (a C++ compiler, and Python's headers
    # for the tracing; else torch ops, Python tracing); true requires the kernels; false: none
    fused_cells: bool | None = None
    # how a training step runs its groups (foldexp/executor/tape.py): off = each group its own
    # autograd graph; graphs = one autograd node for the step, each op captured once into
    # forward and backward aten graphs run as they are; inductor = the same graphs compiled by
    # PyTorch's Inductor (C++ on the CPU, Triton on CUDA; compiles for seconds to a minute on
    # first use, cached on disk). null = off on the CPU; on CUDA inductor where Triton is
    # installed, else graphs
    compile: CompileMode | None = None
    # glibc keeps freed memory for reuse: no page faults on each step's big tensors
    keep_memory: bool = True
    # denormal floats (< 1.2e-38) read and written as 0 on torch's CPU threads: they take a slow
    # path tens of times slower (foldexp/kernels/denormals.py); false keeps IEEE behaviour
    flush_denormal: bool = True


@dataclass
class PathsConfig:
    data_dir: str = MISSING  # datasets (FOLDEXP_DATA wins)
    output_dir: str = MISSING  # this run's folder
    cache_dir: str = MISSING  # featurisation caches


@dataclass
class TrainerConfig:
    epochs: int = count(10, MAX_EPOCHS)  # passes over the training set
    batch_size: int = count(25, MAX_BATCH_SIZE)  # inputs per optimizer step
    eval_batch_size: int = count(256, MAX_BATCH_SIZE)  # inputs per evaluation batch
    # stop after this many optimizer steps in all (0 = no limit)
    max_steps: int = count(0, MAX_STEPS, 0)
    # use at most this many batches per epoch and evaluation (0 = all)
    limit_batches: int = count(0, MAX_STEPS, 0)
    # stop after this many epochs without a better dev score (0 = never)
    patience: int = count(0, MAX_EPOCHS, 0)
    select_metric: str = "dev_accuracy"  # the metrics.csv column that picks the best checkpoint
    select_mode: SelectMode = SelectMode.max  # max | min: whether larger select_metric is better
    # also checkpoint every N steps inside an epoch (0 = epoch ends only)
    checkpoint_every: int = count(0, MAX_STEPS, 0)
    resume: bool = False  # continue from <run dir>/checkpoints/last.pt if it exists
    overwrite: bool = False  # replace a run already in the run dir (else such a folder is refused)
    # read a checkpoint to resume, or a teacher's files, that has no .sha256 sidecar or does not
    # match it (refused otherwise): for runs from before checksums, or files edited knowingly
    trust_unverified: bool = False
    # DataLoader workers building batch schedules alongside training (0 = in the main process)
    num_workers: int = ranged(0, ge=0, le=MAX_WORKERS)
    grad_clip: float = non_negative(0.0)  # clip the gradient norm to this value (0 = off)
    # the learning rate over the run's steps: constant | linear | cosine decay from optimizer.lr
    # to lr_min_ratio of it at the last step (foldexp/train/lr_schedule.py)
    lr_schedule: LRSchedule = LRSchedule.constant
    # first rises linearly to optimizer.lr over N steps
    lr_warmup_steps: int = count(0, MAX_STEPS, 0)
    lr_min_ratio: float = ranged(0.0, ge=0, le=1)  # the decay's end, a share of optimizer.lr
    # steps from the first to the floor, warm-up included; 0 = the run's (trainer.max_steps, else
    # epochs x batches per epoch), which more epochs on resume stretch
    lr_decay_steps: int = count(0, MAX_STEPS, 0)
    # evaluate and keep an average of the weights, avg <- d*avg + (1-d)*w per step (0 = off)
    ema_decay: float = probability(0.0)
    progress: bool = True  # tqdm progress bars (silenced automatically when not a terminal)
    plots: bool = True  # learning-curve PNGs drawn from metrics.csv
    # single | ddp: DistributedDataParallel (gloo on CPU, nccl on CUDA)
    strategy: Strategy = Strategy.single
    # ddp: local processes to spawn (ignored under torchrun, which sets them)
    processes: int = ranged(1, ge=1, le=MAX_PROCESSES)
    # ddp: split each batch across ranks by nodes (tree size) | examples
    balance: Balance = Balance.nodes
    # ddp: a batch may skip a branch (e.g. no internal tree node)
    find_unused_parameters: bool = True
    # a progress line this often inside an epoch when stderr is not a terminal (0 = off)
    log_every_s: float = non_negative(30.0)


@dataclass
class OptimizerConfig:
    _target_: str = MISSING  # optimizer class
    _partial_: bool = True  # parameters are supplied by the trainer
    lr: float = learning_rate(0.001)  # learning rate (< 100: foldexp.config.fields.MAX_LR)
    # L2 penalty (AdamW: decoupled decay); < 10 (foldexp.config.fields.MAX_WEIGHT_DECAY)
    weight_decay: float = decay(0.0)
    # one fused kernel per parameter and step where torch has one (foldexp/train/optim.py):
    # results equal to float rounding, which compounds over a run; false: torch's per-op steps
    fused: bool = True


#: Adam's and Adagrad's ``eps`` is below this. It is added to a root of summed squared gradients
#: before dividing by it: 1e-8 (Adam) and 1e-10 (Adagrad) by default, 1e-3 to 1 where a smaller
#: step on rare features is wanted. 10 and more swamps every gradient's own scale (a dropped
#: minus: 1e8 for 1e-8); 0, or less than float32's smallest normal number (FLOAT32_TINY), divides
#: zero by zero on a parameter that never had a gradient.
MAX_EPS = 10


@dataclass
class SGDConfig(OptimizerConfig):
    """``torch.optim.SGD``'s own keys (``optimizer=sgd``)."""

    momentum: float = probability(0.0)  # heavy-ball momentum, 0 <= m < 1 (0 = none)
    # the gradient's share of the momentum buffer is 1 - dampening; 0 <= d < 1
    dampening: float = probability(0.0)
    nesterov: bool = False  # Nesterov momentum; needs momentum > 0 and dampening 0


@dataclass
class AdamConfig(OptimizerConfig):
    """``torch.optim.Adam``'s and ``AdamW``'s own keys (``optimizer=adam``, ``adamw``)."""

    # decay rates of the gradient's running mean and of its square's, each 0 <= beta < 1
    betas: list[float] = ranged([0.9, 0.999], ge=0, lt=1, length=2)
    eps: float = ranged(1e-8, ge=FLOAT32_TINY, lt=MAX_EPS)  # added to the squares' mean's root
    amsgrad: bool = False  # divide by the largest such root so far (Reddi et al. 2018)


@dataclass
class AdagradConfig(OptimizerConfig):
    """``torch.optim.Adagrad``'s own keys (``optimizer=adagrad``)."""

    lr_decay: float = non_negative(0.0)  # step t's lr is lr / (1 + (t - 1) * lr_decay)
    eps: float = ranged(1e-10, ge=FLOAT32_TINY, lt=MAX_EPS)  # added to the squares' sum's root
    # each parameter's sum of squared gradients starts here
    initial_accumulator_value: float = non_negative(0.0)


@dataclass
class CsvLoggerConfig:
    """``metrics.csv`` and its plots; no options of its own (``trainer.plots`` draws)."""


@dataclass
class TensorBoardLoggerConfig:
    # the training loss every N optimizer steps; every epoch's metrics
    log_every_n_steps: int = count(10, MAX_STEPS)


@dataclass
class LoggerConfig:
    csv: CsvLoggerConfig | None = None
    tensorboard: TensorBoardLoggerConfig | None = None


@dataclass
class TrainConfig:
    seed: int = rng_seed(0)  # seeds python, numpy and torch; same seed, same result on CPU
    task_name: str = "train"  # names the output folder: outputs/<task_name>/...
    dataset: Any = MISSING
    model: Any = MISSING
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    device: DeviceConfig = field(default_factory=DeviceConfig)
    paths: PathsConfig = field(default_factory=PathsConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
