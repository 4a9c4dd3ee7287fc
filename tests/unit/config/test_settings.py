"""Typed settings (``foldexp/config/settings.py``): every composition of every preset with each
option of each run group gives settings equal, key by key, to the composed config they came
from; they are frozen; bad values still fail when the config is composed, naming the key."""

from __future__ import annotations

import dataclasses
import pickle
import re
from enum import Enum
from pathlib import Path
from typing import Any

import pytest
from omegaconf import DictConfig, ListConfig, OmegaConf

from foldexp.config import CONF_DIR, DeviceConfig, OptimizerConfig, PathsConfig, TrainerConfig
from foldexp.config.settings import (
    DeviceSettings,
    OptimizerSettings,
    PathsSettings,
    RunSettings,
    TrainerSettings,
    run_settings,
    settings_of,
)
from foldexp.train.app import compose_config

CONF = Path(CONF_DIR)
PRESETS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))
# the groups a run's own settings come from, each with every option it has
RUN_GROUPS = ("optimizer", "trainer", "device", "logger", "debug")
OPTIONS = [(g, p.stem) for g in RUN_GROUPS for p in sorted((CONF / g).glob("*.yaml"))]
COMPOSITIONS = [[f"experiment={p}"] for p in PRESETS] + [
    [f"experiment={p}", f"{g}={o}"] for p in PRESETS for g, o in OPTIONS
]
TYPED = {
    "trainer": TrainerConfig,
    "device": DeviceConfig,
    "optimizer": OptimizerConfig,
    "paths": PathsConfig,
}


def _value(node: Any) -> Any:
    """A composed value as settings hold it: containers plain, enums as enums."""
    if isinstance(node, (DictConfig, ListConfig)):
        return OmegaConf.to_container(node, resolve=True)
    return node


def _check_group(settings: RunSettings, cfg: DictConfig, group: str) -> None:
    typed = getattr(settings, group)
    assert dataclasses.is_dataclass(typed) and type(typed).__dataclass_params__.frozen
    assert isinstance(typed, TYPED[group]) is False  # a frozen copy, not the schema's instance
    names = [f.name for f in dataclasses.fields(typed)]
    assert names == list(cfg[group].keys()), group
    for name in names:
        got, want = getattr(typed, name), _value(cfg[group][name])
        assert got == want and type(got) is type(want), f"{group}.{name}: {got!r} != {want!r}"
        if isinstance(want, Enum):
            assert got is want


def test_there_are_compositions_of_every_preset_and_option() -> None:
    assert len(PRESETS) >= 14 and len(OPTIONS) >= 13
    assert len(COMPOSITIONS) == len(PRESETS) * (1 + len(OPTIONS))


@pytest.mark.parametrize("overrides", COMPOSITIONS, ids=" ".join)
def test_settings_equal_the_composed_config_key_by_key(
    overrides: list[str], tmp_path: Path, compose_or_skip
) -> None:
    cfg = compose_or_skip(overrides, output_dir=tmp_path)
    settings = run_settings(cfg)
    for group in TYPED:
        _check_group(settings, cfg, group)
    plain = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    assert settings.plain_config() == plain
    assert dict(settings.dataset) == plain["dataset"]
    assert dict(settings.model) == plain["model"]
    assert settings.seed == cfg.seed and settings.task_name == cfg.task_name
    assert {k: _value(v) for k, v in (cfg.logger or {}).items()} == {
        k: None if v is None else dict(v) for k, v in settings.logger.items()
    }
    assert pickle.loads(pickle.dumps(settings)) == settings  # what DDP ranks are sent


def test_settings_are_frozen_and_threads_are_set_by_copy(tmp_path: Path) -> None:
    settings = run_settings(compose_config(["experiment=esol_weave"], output_dir=tmp_path))
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.trainer.epochs = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        settings.dataset["path"] = "x"  # type: ignore[index]
    chosen = settings.with_threads(3)
    assert chosen.device.threads == 3 and chosen.config["device"]["threads"] == 3
    assert settings.device.threads is None and settings.config["device"]["threads"] is None
    copy = settings.plain_config()
    copy["trainer"]["epochs"] = 7
    assert settings.config["trainer"]["epochs"] != 7


def test_a_settings_class_has_its_schemas_fields() -> None:
    """A key declared in a schema is a field of its settings: nothing else to add."""
    for schema, settings in [
        (TrainerConfig, TrainerSettings),
        (DeviceConfig, DeviceSettings),
        (OptimizerConfig, OptimizerSettings),
        (PathsConfig, PathsSettings),
    ]:
        fields = [(f.name, f.type, f.default) for f in dataclasses.fields(schema)]
        assert [(f.name, f.type, f.default) for f in dataclasses.fields(settings)] == fields


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("trainer.epochs=-1", "trainer.epochs"),
        ("trainer.select_mode=median", "select_mode"),
        ("device.threads=0", "device.threads"),
        ("optimizer.lr=1000", "optimizer.lr"),
    ],
)
def test_a_bad_value_still_fails_when_composed_naming_its_key(override: str, key: str) -> None:
    with pytest.raises(Exception, match=key.replace(".", r"\.")):
        compose_config([override])


def test_settings_of_a_saved_group_checks_it() -> None:
    trainer = settings_of(TrainerConfig, {"eval_batch_size": 64, "balance": "examples"})
    assert trainer.eval_batch_size == 64 and trainer.balance.value == "examples"
    with pytest.raises(Exception, match="no_such_key"):
        settings_of(TrainerConfig, {"no_such_key": 1})


# Where the composed config may still be seen: the apps and the CLI (a command's edge), the
# config package (schemas, checks, the conversion), and the code that reads a run folder's saved
# config (``foldexp eval`` merges it with the command line's overrides).
EDGES = {"cli.py", "train/app.py", "bench/app.py", "analysis/evaluate_run.py"}


def test_below_the_edges_no_module_reads_the_composed_config() -> None:
    root = Path(CONF_DIR).parent
    readers = sorted(
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        if p.parts[len(root.parts)] != "config"
        and re.search(r"\b(DictConfig|OmegaConf)\b", p.read_text(encoding="utf-8"))
    )
    assert set(readers) <= EDGES, sorted(set(readers) - EDGES)
