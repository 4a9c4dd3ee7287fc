"""The bench app's config schema: dataclasses registered in Hydra's ConfigStore.

``foldexp/conf/bench.yaml`` starts from ``bench_app_schema`` and every preset under
``foldexp/conf/bench/`` from ``bench/bench_schema``, so a misspelt key, a wrong type or an
unknown experiment fails when Hydra composes the config, before anything is timed. The device
and paths groups are the training app's (``foldexp.config``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from hydra.core.config_store import ConfigStore

from foldexp.config import DeviceConfig, PathsConfig, register_configs
from foldexp.config.fields import MAX_CLASSES, MAX_WIDTH, count, positive, rng_seed
from foldexp.config.run import MAX_THREADS

#: The most trees, leaves, sentences or words a benchmark's input may have: a batch of 256 trees
#: of 64 leaves is the paper's; more than this is a typo that would allocate for minutes.
MAX_BENCH_SIZE = 65536
#: The most timed or warm-up repeats (and steps a turn): each is at least a millisecond.
MAX_REPEATS = 10_000
#: DyNet's memory pool in MB (``--dynet-mem``): 1 TB.
MAX_DYNET_MB = 1 << 20

__all__ = [
    "Experiment",
    "Mode",
    "ManualMode",
    "ScalingConfig",
    "PeersConfig",
    "DynetTasksConfig",
    "BenchConfig",
    "BenchAppConfig",
    "register_bench_configs",
    "check_bench_config",
]


class Experiment(str, Enum):
    table1 = "table1"
    scaling = "scaling"
    peers = "peers"
    dynet_tasks = "dynet_tasks"


class Mode(str, Enum):
    inference = "inference"
    training = "training"


class ManualMode(str, Enum):
    level = "level"
    node = "node"


@dataclass
class ScalingConfig:
    leaves: list[int] = count([16, 32, 64, 128, 256, 512, 1024], MAX_BENCH_SIZE)
    shapes: list[str] = field(default_factory=lambda: ["balanced", "random", "chain"])
    batch_size: int = count(32, MAX_BENCH_SIZE)
    state_size: int = count(128, MAX_WIDTH)
    modes: list[Mode] = field(default_factory=lambda: [Mode.inference])


@dataclass
class PeersConfig:
    implementations: list[str] = field(
        default_factory=lambda: [
            "engine",
            "engine_plain",
            "engine_cached",
            "engine_agenda",
            "engine_unmerged",
            "engine_mkl",
            "engine_onednn",
            "loop",
            "loop_plain",
            "level",
            "dynet",
            "dynet_ab1",
            "dynet_ab2",
            "torchfold",
            "dgl",
        ]
    )
    trees: int = count(256, MAX_BENCH_SIZE)
    leaves: int = count(64, MAX_BENCH_SIZE)
    hidden: int = count(128, MAX_WIDTH)
    embed: int = count(128, MAX_WIDTH)
    vocab: int = count(1000, MAX_BENCH_SIZE)
    classes: int = count(5, MAX_CLASSES)
    loop_trees: int = count(64, MAX_BENCH_SIZE, 0)  # 0: every tree
    warmup: int = count(1, MAX_REPEATS, 0)
    repeats: int = count(5, MAX_REPEATS)
    steps_per_turn: int = count(1, MAX_REPEATS)
    timeout_s: float = positive(600.0)
    dynet_mem: int = count(1536, MAX_DYNET_MB)
    python: str = ""


@dataclass
class DynetTasksConfig:
    tasks: list[str] = field(default_factory=lambda: ["rnnlm", "tagger", "treelstm"])
    rnnlm_batch_sizes: list[int] = count([1, 4, 16, 64], MAX_BENCH_SIZE)
    tagger_batch_sizes: list[int] = count([1, 32], MAX_BENCH_SIZE)
    treelstm_batch_sizes: list[int] = count([1, 25], MAX_BENCH_SIZE)
    sentences: int = count(64, MAX_BENCH_SIZE)
    threads: int = count(1, MAX_THREADS)


@dataclass
class BenchConfig:
    name: str = "quick"
    experiments: list[Experiment] = field(default_factory=lambda: [Experiment.table1])
    warmup: int = count(1, MAX_REPEATS, 0)
    repeats: int = count(3, MAX_REPEATS)
    min_repeats: int = count(1, MAX_REPEATS)
    budget_s: float = positive(20.0)
    boost_below: int = count(32, MAX_BENCH_SIZE, 0)  # 0: no boost
    progress: bool = True
    plots: bool = True
    state_size: int = count(256, MAX_WIDTH)
    leaves: int = count(128, MAX_BENCH_SIZE)
    vocab_size: int = count(128, MAX_BENCH_SIZE)
    batch_sizes: list[int] = count([256, 64, 16, 1], MAX_BENCH_SIZE)
    train_batch_sizes: list[int] = count([], MAX_BENCH_SIZE)
    modes: list[Mode] = field(default_factory=lambda: [Mode.inference, Mode.training])
    manual: ManualMode = ManualMode.level
    warmup_trees: int = count(64, MAX_BENCH_SIZE, 0)  # 0: warm up on the full batch
    scaling: ScalingConfig = field(default_factory=ScalingConfig)
    peers: PeersConfig = field(default_factory=PeersConfig)
    dynet_tasks: DynetTasksConfig = field(default_factory=DynetTasksConfig)


@dataclass
class BenchAppConfig:
    seed: int = rng_seed(0)
    task_name: str = "bench"
    bench: BenchConfig = field(default_factory=BenchConfig)
    device: DeviceConfig = field(default_factory=DeviceConfig)
    paths: PathsConfig = field(default_factory=PathsConfig)


_registered = False


def register_bench_configs() -> None:
    """Registers the bench schemas (and the shared device/paths ones); idempotent."""
    global _registered
    if _registered:
        return
    register_configs()
    cs = ConfigStore.instance()
    cs.store(name="bench_app_schema", node=BenchAppConfig)
    cs.store(group="bench", name="bench_schema", node=BenchConfig)
    _registered = True


_SECTIONS = {"": BenchConfig, "scaling": ScalingConfig, "peers": PeersConfig,
             "dynet_tasks": DynetTasksConfig}  # fmt: skip


def check_bench_config(cfg: Any) -> None:
    """Refuses, naming the key, a ``bench.*`` number outside its schema range or a peer that
    does not exist, before anything is timed (``foldexp.config.errors.ConfigError``)."""
    from foldexp.bench.peers import PEERS  # registered at import, tests add fakes
    from foldexp.config.checks import check_section, check_value
    from foldexp.config.errors import ConfigError
    from foldexp.config.settings import resolved

    bench = resolved(cfg.bench)
    for name, schema in _SECTIONS.items():
        node = bench.get(name, {}) if name else bench
        check_section(f"bench.{name}" if name else "bench", node, schema)
    check_section("device", resolved(cfg.device), DeviceConfig)
    seed = next(f for f in dataclasses.fields(BenchAppConfig) if f.name == "seed")
    check_value("seed", cfg.get("seed", 0), seed)
    for name in bench.get("peers", {}).get("implementations", []):
        if name not in PEERS:
            raise ConfigError(
                f"bench.peers.implementations: {name!r} is not a peer; one of {', '.join(PEERS)}"
            )
