"""Building a run's dataset and model from their configs, through foldexp's registry.

``build_dataset`` calls the builder ``dataset._target_`` names with the dataset keys;
``build_model`` builds ``model._target_`` with the model's own keys plus the entries of the
dataset's ``info`` its constructor names (``foldexp.models.contract``), and checks the contract
before any work. Both are plain calls, not Hydra's ``instantiate``: a config is data, and a
config read back from a run folder is untrusted (``foldexp.config.targets.check_registered``).
Rebuilding a trained run from its folder is ``foldexp.train.runs``.
"""

from __future__ import annotations

import inspect
import random
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from foldexp.config.errors import ConfigError
from foldexp.config.settings import plain_config
from foldexp.config.targets import import_target
from foldexp.models.contract import check_model

__all__ = ["build_dataset", "build_model", "check_vectors", "meta_model", "plain_config"]


def build_dataset(dataset_cfg: Mapping[str, Any], trained: Mapping[str, Any] | None = None) -> Any:
    """The ``DataBundle`` that ``dataset._target_`` builds from the other dataset keys.

    ``trained``: the ``info`` of a trained run the data is read for (``foldexp eval``), given
    to a builder that takes it: the run's classes are the classes (a file may hold some of them
    only), and a split on which a metric is not defined is scored, not refused."""
    keys = plain_config(dataset_cfg)
    builder = import_target(str(keys.pop("_target_")))
    if trained is not None and "trained" in inspect.signature(builder).parameters:
        keys["trained"] = trained
    return builder(**keys)


def check_vectors(dataset_cfg: Any, model_cfg: Any, info: Mapping[str, Any]) -> None:
    """Fails before the model is built when the dataset's pretrained vectors (``info``'s
    ``embeddings``) are not as wide as the model's ``embed_size``."""
    embeddings = info.get("embeddings")
    embed_size = model_cfg.get("embed_size")
    if embeddings is not None and embed_size is not None and embeddings.shape[1] != embed_size:
        raise ConfigError(
            f"dataset.word_vectors={dataset_cfg.get('word_vectors')} holds "
            f"{embeddings.shape[1]}-d vectors but model.embed_size={embed_size}; set "
            f"model.embed_size={embeddings.shape[1]} or use vectors of width {embed_size}"
        )


def build_model(model_cfg: Mapping[str, Any], info: Mapping[str, Any]) -> torch.nn.Module:
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


def meta_model(model_cfg: Mapping[str, Any], info: Mapping[str, Any]) -> torch.nn.Module | None:
    """The model ``build_model`` would build, on the meta device: its parameters' shapes and
    dtypes without their memory. ``None`` for a model (of a user's own) whose constructor needs
    real tensors."""
    try:
        with _random_states_kept(), torch.device("meta"):
            return build_model(model_cfg, info)
    except (TypeError, RuntimeError, NotImplementedError):
        return None


@contextmanager
def _random_states_kept() -> Iterator[None]:
    """Python's, numpy's and torch's CPU generators left as they were found: a dry build must not
    change the run. Building draws (a block's type inference runs its module once on a test
    batch, dropout included), so without this the checked run initialised its weights from other
    numbers than the unchecked one."""
    python, numpy = random.getstate(), np.random.get_state()
    try:
        with torch.random.fork_rng(devices=[]):
            yield
    finally:
        random.setstate(python)
        np.random.set_state(numpy)
