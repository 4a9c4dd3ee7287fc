"""Typed settings: the composed Hydra config, checked, turned into frozen dataclasses once.

A command's edge (``train/loop.py:run_train``, the apps) composes and checks the config, then
calls ``run_settings(cfg)``; below it functions take the settings they read as typed arguments
— the trainer's loop ``TrainerSettings``, the device setup ``DeviceSettings`` — and no module
there reads the ``DictConfig``. Each settings class is its schema (``run.py``) made frozen:
the same fields, types and values, declared once in the schema (``OmegaConf.to_object`` gives
the schema's instance, ``frozen`` copies it), so a new key is declared and checked in
``foldexp/config/`` and read where its settings are passed.

``RunSettings.config`` keeps the whole config as plain values (enums as strings, interpolations
resolved): what checkpoints, ``run_info.json`` and ``results.json`` store. The dataset's and the
model's keys stay plain mappings: their builders (``foldexp.experiments``) take ``**keys``.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ValidationError

from foldexp.config.errors import ConfigError
from foldexp.config.run import (
    AdagradConfig,
    AdamConfig,
    DeviceConfig,
    OptimizerConfig,
    PathsConfig,
    SGDConfig,
    TrainerConfig,
)

__all__ = [
    "ComposedConfig",
    "DeviceSettings",
    "OptimizerSettings",
    "PathsSettings",
    "ReadOnlyMap",
    "RunSettings",
    "TrainerSettings",
    "config_yaml",
    "frozen",
    "plain_config",
    "resolved",
    "run_settings",
    "settings",
    "settings_of",
]

#: What Hydra composes (``foldexp.train.app.compose_config``, ``@hydra.main``): a command's input.
ComposedConfig = DictConfig

T = TypeVar("T")

_FROZEN: dict[type, type] = {}


def _frozen_class(schema: type) -> type:
    """The schema's fields (names, types, defaults) as a frozen dataclass, made once per schema
    and kept at module level under its name, so it pickles (DDP ranks receive it)."""
    if schema not in _FROZEN:
        name = schema.__name__.removesuffix("Config") + "Settings"
        fields = [
            (
                f.name,
                f.type,
                dataclasses.field(
                    default=f.default, default_factory=f.default_factory, metadata=f.metadata
                ),
            )
            for f in dataclasses.fields(schema)
        ]
        cls = dataclasses.make_dataclass(name, fields, frozen=True)
        cls.__module__, cls.__qualname__ = __name__, name
        cls.__doc__ = f"``{schema.__name__}``'s settings, frozen (``foldexp/config/run.py``)."
        globals()[name] = _FROZEN[schema] = cls
    return _FROZEN[schema]


def frozen(schema_obj: T) -> T:
    """A schema instance (``OmegaConf.to_object``'s) as its frozen settings class: the same
    values, which code below a command's edge cannot change."""
    cls = _frozen_class(type(schema_obj))
    values = {f.name: getattr(schema_obj, f.name) for f in dataclasses.fields(schema_obj)}
    return cls(**values)  # type: ignore[no-any-return]


def settings_of(schema: type[T], values: Any, prefix: str = "") -> T:
    """``values`` (a mapping: a run folder's saved group ``prefix``, with overrides) checked
    against ``schema`` (types, enums, unknown keys; absent keys take its defaults) as its
    frozen settings; a value the schema refuses raises ``ConfigError`` naming
    ``prefix.key=value`` on one line (OmegaConf's own message spans three and names the key
    without its group)."""
    try:
        merged = OmegaConf.merge(OmegaConf.structured(schema), values)
    except ValidationError as exc:
        message = str(exc.msg).splitlines()[0] if exc.msg else type(exc).__name__
        key = f"{prefix}.{exc.full_key}" if prefix else str(exc.full_key)
        raise ConfigError(f"{key}={exc.value}: {message}") from None
    return frozen(OmegaConf.to_object(merged))  # type: ignore[arg-type]


if TYPE_CHECKING:  # to a type checker a settings class is its schema, fields and all
    TrainerSettings = TrainerConfig
    DeviceSettings = DeviceConfig
    OptimizerSettings = OptimizerConfig
    PathsSettings = PathsConfig
else:
    TrainerSettings = _frozen_class(TrainerConfig)
    DeviceSettings = _frozen_class(DeviceConfig)
    OptimizerSettings = _frozen_class(OptimizerConfig)
    PathsSettings = _frozen_class(PathsConfig)
    for _schema in (AdamConfig, AdagradConfig, SGDConfig):  # made at import: a rank unpickles them
        _frozen_class(_schema)


class ReadOnlyMap(Mapping[str, Any]):
    """A mapping no code can change (``MappingProxyType`` does not pickle; DDP ranks need it)."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        self._data = dict(data)

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return repr(self._data)


def _read_only(value: Any) -> Any:
    if isinstance(value, Mapping):
        return ReadOnlyMap({k: _read_only(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(_read_only(v) for v in value)
    return value


@dataclasses.dataclass(frozen=True)
class RunSettings:
    """Everything a training run reads, typed; made by ``run_settings`` at the command's edge."""

    seed: int
    task_name: str
    trainer: TrainerSettings
    device: DeviceSettings
    optimizer: OptimizerSettings  # the class of the chosen optimizer's schema (AdamConfig, ...)
    paths: PathsSettings
    dataset: Mapping[str, Any]  # the dataset builder's keys, ``_target_`` included (read-only)
    model: Mapping[str, Any]  # the model class's keys, ``_target_`` included (read-only)
    logger: Mapping[str, Any]  # the loggers chosen: ``csv``, ``tensorboard`` (null = off)
    config: Mapping[str, Any]  # the whole config, plain: what a run folder stores (read-only)

    def plain_config(self) -> dict[str, Any]:
        """``config`` as a fresh mutable dict (to store or to change a copy of)."""
        return _mutable(self.config)

    def with_threads(self, threads: int) -> RunSettings:
        """These settings with ``device.threads`` chosen (``train/threads.py``), in ``config``
        too: checkpoints and ``run_info.json`` store the count that repeats the run."""
        config = self.plain_config()
        config["device"]["threads"] = threads
        return dataclasses.replace(
            self,
            device=dataclasses.replace(self.device, threads=threads),
            config=_read_only(config),
        )


def _mutable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _mutable(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_mutable(v) for v in value]
    return copy.copy(value)


def plain_config(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """A config (composed, or a plain mapping: a run folder's, the settings' ``model``) as
    plain Python values: enums as their strings, interpolations resolved. Always a fresh copy,
    nested lists and mappings included: a builder that extends its list argument (a model's
    ``sizes``) must not change the settings that the next build (after the memory check's
    meta build) reads."""
    if isinstance(cfg, DictConfig):
        return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)  # type: ignore[return-value]
    return _mutable(cfg)  # type: ignore[no-any-return]


def resolved(node: Any) -> Any:
    """A composed node as plain dicts and lists, interpolations resolved, enums kept: what a
    check below the command's edge reads (``bench.schema.check_bench_config``)."""
    return OmegaConf.to_container(node, resolve=True)


def settings(node: Any) -> Any:
    """A composed group whose schema is a dataclass (``cfg.device``, the bench's ``cfg.bench``)
    as that schema's frozen settings."""
    return frozen(OmegaConf.to_object(node))


def config_yaml(cfg: DictConfig) -> str:
    """The composed config as YAML, as a run folder keeps it (``bench_config.yaml``)."""
    return OmegaConf.to_yaml(cfg)


def run_settings(cfg: DictConfig) -> RunSettings:
    """The composed, checked training config as ``RunSettings``: the one place it is read."""
    plain = plain_config(cfg)
    return RunSettings(
        seed=int(cfg.seed),
        task_name=str(cfg.get("task_name", "train")),
        trainer=settings(cfg.trainer),
        device=settings(cfg.device),
        optimizer=settings(cfg.optimizer),
        paths=settings(cfg.paths),
        # one level read-only: the builders take ``**keys``, lists as lists
        dataset=ReadOnlyMap(copy.deepcopy(plain["dataset"])),
        model=ReadOnlyMap(copy.deepcopy(plain["model"])),
        logger=_read_only(plain.get("logger") or {}),
        config=_read_only(plain),
    )
