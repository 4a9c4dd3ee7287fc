"""Building a run's dataset and model from their configs, and a trained run from its folder.

``build_dataset`` calls the builder ``dataset._target_`` names with the dataset keys;
``build_model`` builds ``model._target_`` with the model's own keys plus the entries of the
dataset's ``info`` its constructor names (``foldexp.models.contract``), and checks the contract
before any work. Both are plain calls, not Hydra's ``instantiate``: a config is data, and a
config read back from a run folder is untrusted (``foldexp.validate.check_registered``).

A run folder is self-contained: ``run_info.json`` holds the resolved config and the dataset's
``info`` (vocabulary, class and target names, feature sizes, target statistics) in plain JSON,
so ``load_trained`` rebuilds the model and its best weights without the training data.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from foldexp.models.contract import check_model
from foldexp.train.artifacts import read_verified_json, write_json
from foldexp.train.checkpoint import load_checkpoint
from foldexp.validate import ConfigError, check_registered, import_target

__all__ = [
    "RUN_INFO",
    "TrainedRun",
    "build_dataset",
    "build_model",
    "decode_info",
    "encode_info",
    "load_trained",
    "plain_config",
    "write_run_info",
]

RUN_INFO = "run_info.json"


def plain_config(cfg: DictConfig | Mapping[str, Any]) -> dict[str, Any]:
    """A config as plain Python values (enums as their strings, interpolations resolved)."""
    if isinstance(cfg, DictConfig):
        return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)  # type: ignore[return-value]
    return dict(cfg)


def build_dataset(dataset_cfg: DictConfig | Mapping[str, Any]) -> Any:
    """The ``DataBundle`` that ``dataset._target_`` builds from the other dataset keys."""
    keys = plain_config(dataset_cfg)
    builder = import_target(str(keys.pop("_target_")))
    return builder(**keys)


def build_model(
    model_cfg: DictConfig | Mapping[str, Any], info: Mapping[str, Any]
) -> torch.nn.Module:
    """``model._target_`` built from the model's keys and the dataset ``info`` it takes."""
    keys = plain_config(model_cfg)
    target = str(keys.pop("_target_"))
    cls = import_target(target)
    params = inspect.signature(cls).parameters
    takes_all = any(p.kind is p.VAR_KEYWORD for p in params.values())
    if "name" not in params and not takes_all:
        keys.pop("name", None)  # every model config has a display name; a model need not take it
    clash = sorted(k for k in keys if k in info)
    if clash:
        raise ConfigError(
            f"model.{clash[0]} is also provided by the dataset ({target} receives it from the "
            "dataset's info); remove it from the model config"
        )
    provided = {k: v for k, v in info.items() if takes_all or k in params}
    model = cls(**provided, **keys)
    check_model(model, target)
    return model


# ---------------------------------------------------------------------- the run folder


def encode_info(info: Mapping[str, Any]) -> dict[str, Any]:
    """``info`` in plain JSON: a vocabulary as its word list, a matrix as its shape (the
    checkpoint holds the trained values)."""
    out: dict[str, Any] = {}
    for key, value in info.items():
        if hasattr(value, "to_dict"):
            out[key] = {"__vocabulary__": value.to_dict()}
        elif isinstance(value, np.ndarray):
            out[key] = {"__matrix_shape__": list(value.shape)}
        elif isinstance(value, tuple):
            out[key] = list(value)
        else:
            out[key] = value
    return out


def decode_info(encoded: Mapping[str, Any]) -> dict[str, Any]:
    """The inverse of ``encode_info`` (matrices come back as zeros of their shape)."""
    from foldexp.data.vocab import Vocabulary

    out: dict[str, Any] = {}
    for key, value in encoded.items():
        if isinstance(value, dict) and "__vocabulary__" in value:
            out[key] = Vocabulary.from_dict(value["__vocabulary__"])
        elif isinstance(value, dict) and "__matrix_shape__" in value:
            out[key] = np.zeros(value["__matrix_shape__"], dtype=np.float32)
        else:
            out[key] = value
    return out


def write_run_info(out_dir: Path, cfg: DictConfig, info: Mapping[str, Any]) -> Path:
    """Writes ``run_info.json``: what ``load_trained`` needs besides the weights."""
    return write_json(
        Path(out_dir) / RUN_INFO, {"config": plain_config(cfg), "info": encode_info(info)}
    )


class TrainedRun:
    """A trained run loaded from its folder: ``model`` (best weights, eval mode), ``config``
    (the resolved training config) and ``info`` (the dataset facts it was built with)."""

    def __init__(self, folder: Path, model: torch.nn.Module, config: dict, info: dict) -> None:
        self.folder, self.model, self.config, self.info = folder, model, config, info


def load_trained(
    folder: str | Path, allow_targets: Iterable[str] = (), checkpoint: str = "best.pt"
) -> TrainedRun:
    """Rebuilds a run's model from ``run_info.json`` and loads ``checkpoints/<checkpoint>``.

    Every ``_target_`` in the run's config must be one of foldexp's own (``TARGETS``) or named in
    ``allow_targets`` by the caller: the folder may come from someone else.
    """
    folder = Path(folder)
    source = folder / RUN_INFO
    if not source.is_file():
        raise FileNotFoundError(
            f"{folder} is not a trained run: it has no {RUN_INFO} (runs trained before foldexp "
            "stored it cannot be loaded; train again)"
        )
    saved = read_verified_json(source)
    if not isinstance(saved, dict) or not isinstance(saved.get("config"), dict):
        raise ConfigError(f"{source}: expected an object with 'config' and 'info'")
    config, allowed = saved["config"], set(allow_targets)
    check_registered(config, str(source), allowed=allowed)
    if not isinstance(config.get("model"), dict):
        raise ConfigError(f"{source}: config has no model section")
    weights = folder / "checkpoints" / checkpoint
    if not weights.is_file():
        raise FileNotFoundError(f"{folder}: no checkpoints/{checkpoint}; the run did not finish")
    info = decode_info(saved.get("info") or {})
    model = build_model(config["model"], info)
    load_checkpoint(weights, model, restore_rng=False)
    return TrainedRun(folder, model.eval(), config, info)
