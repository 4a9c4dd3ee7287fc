"""The bench app's config schema: dataclasses registered in Hydra's ConfigStore.

``foldexp/conf/bench.yaml`` starts from ``bench_app_schema`` and every preset under
``foldexp/conf/bench/`` from ``bench/bench_schema``, so a misspelt key, a wrong type or an
unknown experiment fails when Hydra composes the config, before anything is timed. The device
and paths groups are the training app's (``foldexp.config``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from foldexp.config import DeviceConfig, PathsConfig, register_configs
from foldexp.config.fields import non_negative, positive

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
    leaves: list[int] = positive([16, 32, 64, 128, 256, 512, 1024])
    shapes: list[str] = field(default_factory=lambda: ["balanced", "random", "chain"])
    batch_size: int = positive(32)
    state_size: int = positive(128)
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
    trees: int = positive(256)
    leaves: int = positive(64)
    hidden: int = positive(128)
    embed: int = positive(128)
    vocab: int = positive(1000)
    classes: int = positive(5)
    loop_trees: int = non_negative(64)  # 0: every tree
    warmup: int = non_negative(1)
    repeats: int = positive(5)
    steps_per_turn: int = positive(1)
    timeout_s: float = positive(600.0)
    dynet_mem: int = positive(1536)
    python: str = ""


@dataclass
class DynetTasksConfig:
    tasks: list[str] = field(default_factory=lambda: ["rnnlm", "tagger", "treelstm"])
    rnnlm_batch_sizes: list[int] = positive([1, 4, 16, 64])
    tagger_batch_sizes: list[int] = positive([1, 32])
    treelstm_batch_sizes: list[int] = positive([1, 25])
    sentences: int = positive(64)
    threads: int = positive(1)


@dataclass
class BenchConfig:
    name: str = "quick"
    experiments: list[Experiment] = field(default_factory=lambda: [Experiment.table1])
    warmup: int = non_negative(1)
    repeats: int = positive(3)
    min_repeats: int = positive(1)
    budget_s: float = positive(20.0)
    boost_below: int = non_negative(32)  # 0: no boost
    progress: bool = True
    plots: bool = True
    state_size: int = positive(256)
    leaves: int = positive(128)
    vocab_size: int = positive(128)
    batch_sizes: list[int] = positive([256, 64, 16, 1])
    train_batch_sizes: list[int] = positive([])
    modes: list[Mode] = field(default_factory=lambda: [Mode.inference, Mode.training])
    manual: ManualMode = ManualMode.level
    warmup_trees: int = non_negative(64)  # 0: warm up on the full batch
    scaling: ScalingConfig = field(default_factory=ScalingConfig)
    peers: PeersConfig = field(default_factory=PeersConfig)
    dynet_tasks: DynetTasksConfig = field(default_factory=DynetTasksConfig)


@dataclass
class BenchAppConfig:
    seed: int = 0
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
    does not exist, before anything is timed (``foldexp.validate.ConfigError``)."""
    from foldexp.bench.peers import PEERS  # registered at import, tests add fakes
    from foldexp.validate import ConfigError, check_section

    bench = OmegaConf.to_container(cfg.bench, resolve=True)
    for name, schema in _SECTIONS.items():
        node = bench.get(name, {}) if name else bench
        check_section(f"bench.{name}" if name else "bench", node, schema)
    for name in bench.get("peers", {}).get("implementations", []):
        if name not in PEERS:
            raise ConfigError(
                f"bench.peers.implementations: {name!r} is not a peer; one of {', '.join(PEERS)}"
            )
