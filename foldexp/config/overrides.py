"""What the command line's overrides do to a composed config, beyond Hydra's own checks.

``check_bool_overrides`` refuses an override giving a boolean key anything but true or false
(OmegaConf would read ``2`` or ``yes`` as true); ``drop_preset_model_keys`` keeps an experiment
preset's keys for its own model away from a model of the user's own chosen on the command line.
Both run right after composing (``foldexp.config.hydra_errors.check_command_line``).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict

from foldexp import config as schemas
from foldexp.config.errors import ConfigError
from foldexp.config.targets import schema_for

__all__ = [
    "check_bool_overrides",
    "drop_preset_model_keys",
    "model_group_keys",
    "preset_model_keys",
]


log = logging.getLogger(__name__)


def check_bool_overrides(cfg: DictConfig, overrides: Sequence[str]) -> None:
    """Refuses a command-line override that gives a boolean key anything but true or false
    (or null, where the key may be null). OmegaConf reads any integer into a boolean key
    (``device.keep_memory=2`` would be true) and also ``yes``/``on``/``n``; the schema's
    meaning is true or false, so anything else fails here, naming the key and the value.

    Raises:
        ConfigError: the first such override.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf.nodes import BooleanNode

    for override in OverridesParser.create().parse_overrides(list(overrides)):
        if override.is_delete() or override.is_sweep_override() or "." not in override.key_or_group:
            continue
        parent_key, _, leaf = override.key_or_group.rpartition(".")
        parent = OmegaConf.select(cfg, parent_key)
        node = parent._get_node(leaf) if isinstance(parent, DictConfig) else None
        if not isinstance(node, BooleanNode):
            continue
        value = override.value()
        if isinstance(value, bool) or (value is None and node._is_optional()):
            continue
        allowed = "true, false or null" if node._is_optional() else "true or false"
        raise ConfigError(f"{override.key_or_group}={override.get_value_element_as_str()}; "
                          f"expected {allowed}")  # fmt: skip


def _typed_key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def _choice(group: str) -> str | None:
    """The option of ``group`` the config was composed with, from Hydra's record of the
    choices; ``None`` where Hydra has not recorded one."""
    from hydra.core.hydra_config import HydraConfig

    try:
        choice = HydraConfig.get().runtime.choices.get(group)
    except (ValueError, AttributeError):  # HydraConfig not set: composed outside Hydra
        return None
    return str(choice) if choice else None


def model_group_keys(name: str) -> set[str]:
    """The keys foldexp's own model file ``foldexp/conf/model/NAME.yaml`` gives: its own and
    its schema's (``tree_lstm``: ``embed_size``, ...), all for foldexp's model; none for a
    file foldexp does not have (a user's, on ``hydra.searchpath``)."""
    path = Path(schemas.CONF_DIR, "model", f"{name}.yaml")
    if not path.is_file():
        return set()
    node = OmegaConf.load(path)
    keys = {str(k) for k in node}
    target = node.get("_target_") if not OmegaConf.is_missing(node, "_target_") else None
    schema = schema_for(str(target)) if target else None
    if schema is not None:
        keys |= {f.name for f in dataclasses.fields(schema)}
    return keys


def preset_model_keys(name: str, seen: frozenset[str] = frozenset()) -> set[str]:
    """The ``model`` keys foldexp's own experiment preset ``name`` sets
    (``foldexp/conf/experiment/NAME.yaml`` and the presets its defaults list builds on:
    ``sst_treelstm_glove`` on ``sst_treelstm``); none for a preset foldexp does not have."""
    path = Path(schemas.CONF_DIR, "experiment", f"{name}.yaml")
    if name in seen or not path.is_file():
        return set()
    node = OmegaConf.load(path)
    model = node.get("model")
    keys = {str(k) for k in model} if isinstance(model, DictConfig) else set()
    for entry in node.get("defaults") or []:
        if isinstance(entry, str) and entry != "_self_":
            keys |= preset_model_keys(entry, seen | {name})
    return keys


def drop_preset_model_keys(cfg: DictConfig, overrides: Sequence[str]) -> None:
    """A model of the user's own (``model=custom``, or a model file of the user's own)
    receives only its own keys: those the command line gives it and its model file's. A
    foldexp experiment preset's keys for its own model (``experiment=text_csv`` sets
    ``model.hidden_size`` for its LSTM) are left out of ``cfg``, with a log line naming them, so
    that they neither fail the user's constructor nor reach it unasked. Only the preset's keys
    are dropped: a key the user's own model file sets (``size: 48``) reaches the model. Call
    right after composing, with the command line's overrides."""
    model = cfg.get("model")
    if not isinstance(model, DictConfig) or OmegaConf.is_missing(model, "_target_"):
        return
    if schema_for(str(model.get("_target_"))) is not None:
        return  # a foldexp model: its schema checks the keys
    experiment, group = _choice("experiment"), _choice("model")
    from_preset = preset_model_keys(experiment) if experiment is not None else set()
    # model._target_=my.Model on foldexp's own model group (no model=custom): its keys too
    from_preset |= model_group_keys(group) if group is not None else set()
    typed = {
        _typed_key(o).removeprefix("model.").split(".")[0]
        for o in overrides
        if _typed_key(o).startswith("model.")
    }
    preset = [
        str(k)
        for k in model
        if k not in ("_target_", "name") and k not in typed and str(k) in from_preset
    ]
    if not preset:
        return
    log.info(
        "model._target_=%s: the model keys %s (of experiment=%s, model=%s) are for "
        "foldexp's own model and are not passed to yours (give yours its keys with "
        "+model.KEY=VALUE)",
        model.get("_target_"), ", ".join(f"model.{k}" for k in preset), experiment, group,
    )  # fmt: skip
    with open_dict(model):
        for key in preset:
            del model[key]
