"""Config checks and the registry of buildable targets.

``check_config(cfg)`` runs right after Hydra composes a training config, before any data is read:
every numeric key with a range in its schema (``foldexp.config.ranged``) must lie in it;
``optimizer._target_`` and ``dataset._target_`` must be registered ones (``TARGETS``), and a
model of the user's own a ``torch.nn.Module`` class; the ``dataset`` and ``model`` nodes may hold
only the keys their schema (or, for a model of the user's own, its constructor) takes — so
``+dataset.pth=…`` fails naming the keys that exist instead of being ignored; a file key
(``dataset.word_vectors``) must name an existing file. Errors are
``ConfigError``s naming the key, the value and what is allowed.

``TARGETS`` is foldexp's own registry: the dataset builders, models and optimizers a config may
name. A config read back from a run folder (``results.json``, ``run_config.json``) is untrusted:
``check_registered`` refuses any ``_target_`` outside the registry, anywhere in it, naming the
file and the key, so a crafted run folder cannot make ``foldexp ensemble``/``predict`` call
arbitrary code. ``check_run_config`` checks such a config in full before a model is rebuilt from
it: registered targets of the right role (a model is a model), then ``check_config``'s checks.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import inspect
import logging
import math
import os
from collections.abc import Callable, Mapping, Sequence
from enum import Enum
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from foldexp import config as schemas

__all__ = [
    "ConfigError",
    "MissingFileError",
    "TARGETS",
    "check_config",
    "check_bool_overrides",
    "check_registered",
    "check_run_config",
    "check_memory",
    "check_section",
    "check_value",
    "drop_preset_model_keys",
    "import_target",
    "path_keys",
    "physical_memory",
    "plain",
    "schema_defaults",
    "schema_for",
    "unknown_key",
]


log = logging.getLogger(__name__)


class ConfigError(ValueError):
    """A config value outside its valid range, an unknown key or an unregistered target."""


def unknown_key(key: str, owner: str, keys: Sequence[str]) -> str:
    """One line for a key its section lacks: the closest keys (``difflib``) first, as "did you
    mean", then every key (those starting with ``_`` left out). The one wording of a misspelt
    key, whether Hydra refused the override (``trainer.epoch=3``) or a check here found it
    (``+trainer.epoch=3``, a run folder's config)."""
    name = key.rsplit(".", 1)[-1]
    prefix = key[: len(key) - len(name)]
    shown = [str(k) for k in keys if not str(k).startswith("_")]
    close = difflib.get_close_matches(name, shown, n=3, cutoff=0.6)
    if not close:  # a key written in another case: TRAINER.Epochs
        lower = {k.lower(): k for k in shown}
        close = [lower[c] for c in difflib.get_close_matches(name.lower(), list(lower), n=3)]
    hint = f"; did you mean {' or '.join(prefix + c for c in close)}? Its" if close else "; its"
    return f"{key} is not a key of {owner}{hint} keys are {', '.join(shown)}"


class MissingFileError(ConfigError):
    """A file key (``dataset.word_vectors``) naming a file that does not exist: apart from the
    other errors because it depends on the machine, not only on the config."""


def _defaults_target(cls: type) -> str:
    return next(f.default for f in dataclasses.fields(cls) if f.name == "_target_")


_DATASET_SCHEMAS = (
    schemas.CalculatorDataConfig,
    schemas.SSTDataConfig,
    schemas.SSTSentencesDataConfig,
    schemas.MoleculeDataConfig,
    schemas.MarkedSequencesDataConfig,
    schemas.TreesPTBDataConfig,
    schemas.TextCSVDataConfig,
)
_MODEL_SCHEMAS = (
    schemas.TreeLSTMModelConfig,
    schemas.SequenceLSTMModelConfig,
    schemas.WeaveModelConfig,
    schemas.AttentionModelConfig,
    schemas.ChildSumTreeLSTMModelConfig,
    schemas.CalcDecodeModelConfig,
    schemas.DMPNNModelConfig,
)
#: Each registered optimizer's schema: its keys are what its YAML file may set.
_OPTIMIZER_SCHEMAS: dict[str, type] = {
    "torch.optim.Adam": schemas.AdamConfig,
    "torch.optim.AdamW": schemas.AdamConfig,
    "torch.optim.Adagrad": schemas.AdagradConfig,
    "torch.optim.SGD": schemas.SGDConfig,
}
_OPTIMIZERS = tuple(_OPTIMIZER_SCHEMAS)

#: What each dataset's examples are, and what each model reads. A model given examples of another
#: kind failed in its first batch, after the data had loaded: seq_lstm on calculator trees with
#: "cannot unpack non-iterable Tree object", weave with a TypeError about atom_features.
_EXAMPLES: dict[type, str] = {
    schemas.CalculatorDataConfig: "trees",
    schemas.SSTDataConfig: "trees",
    schemas.TreesPTBDataConfig: "trees",
    schemas.SSTSentencesDataConfig: "sentences",
    schemas.TextCSVDataConfig: "sentences",
    schemas.MoleculeDataConfig: "molecules",
    schemas.MarkedSequencesDataConfig: "sequences of numbers",
    schemas.TreeLSTMModelConfig: "trees",
    schemas.ChildSumTreeLSTMModelConfig: "trees",
    schemas.SequenceLSTMModelConfig: "sentences",
    schemas.WeaveModelConfig: "molecules",
    schemas.DMPNNModelConfig: "molecules",
    schemas.AttentionModelConfig: "sequences of numbers",
}

#: ``_target_`` → its schema (``None`` for optimizers, whose keys the optimizer schema checks).
TARGETS: dict[str, type | None] = {
    **{_defaults_target(c): c for c in (*_DATASET_SCHEMAS, *_MODEL_SCHEMAS)},
    **dict.fromkeys(_OPTIMIZERS),
}

_GROUP_SCHEMAS = {
    "trainer": schemas.TrainerConfig,
    "device": schemas.DeviceConfig,
}


plain = schemas.enum_value  # an enum config value as its string; the one home is foldexp.config


def schema_defaults(config: Mapping[str, Any]) -> dict[str, Any]:
    """``section.key`` → the schema's default, for the sections of ``config`` that have a schema
    (``trainer``, ``device``; ``optimizer``, ``dataset`` and ``model`` by their ``_target_``), as
    a stored config holds values (enums as strings). A key a newer foldexp added is absent from
    an older run's stored config: the run had its default."""
    sections: dict[str, type | None] = dict(_GROUP_SCHEMAS)
    for section, table in (
        ("optimizer", _OPTIMIZER_SCHEMAS),
        ("dataset", TARGETS),
        ("model", TARGETS),
    ):
        node = config.get(section)
        target = node.get("_target_") if isinstance(node, Mapping) else None
        sections[section] = table.get(target) if isinstance(target, str) else None
    defaults: dict[str, Any] = {}
    for section, schema in sections.items():
        for spec in dataclasses.fields(schema) if schema is not None else ():
            if spec.default is not dataclasses.MISSING:  # an enum as its string, as stored
                value = spec.default
                defaults[f"{section}.{spec.name}"] = (
                    plain(value) if isinstance(value, Enum) else value
                )
            elif spec.default_factory is not dataclasses.MISSING:
                defaults[f"{section}.{spec.name}"] = spec.default_factory()
    return defaults


def schema_for(target: str) -> type | None:
    """The schema of a registered dataset or model target, else ``None``."""
    return TARGETS.get(target)


def import_target(target: str) -> Callable[..., Any]:
    """The callable a dotted ``_target_`` names (``pkg.module.attr``)."""
    module, _, attr = target.rpartition(".")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigError(f"_target_={target!r} cannot be imported: {exc}") from None


def check_registered(
    config: Mapping[str, Any],
    source: str,
    path: str = "",
    allowed: set[str] | frozenset[str] = frozenset(),
) -> None:
    """Refuses a config (read from ``source``) naming any ``_target_`` outside ``TARGETS``
    and ``allowed`` (targets the caller trusts, e.g. ``--allow-target my.Model``)."""
    for key, value in config.items():
        where = f"{path}.{key}" if path else str(key)
        if key == "_target_" and not isinstance(value, str):
            raise ConfigError(
                f"{source}: {where}={value!r} is not a registered target name: a _target_ must be "
                "a string naming one of foldexp's datasets, models or optimizers"
            )
        if key == "_target_" and not _is_registered(value, allowed):
            raise ConfigError(
                f"{source}: {where}={value!r} is not one of foldexp's registered targets; a run "
                "folder can only name foldexp's own datasets, models and optimizers (it may come "
                "from someone else, so it is never used to import code). For a model of your own, "
                "pass --allow-target " + str(value)
            )
        if isinstance(value, Mapping):
            check_registered(value, source, where, allowed)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, Mapping):
                    check_registered(item, source, f"{where}[{i}]", allowed)


def _is_registered(target: Any, allowed: set[str] | frozenset[str]) -> bool:
    """Whether ``target`` names a registered or allowed target; a file may hold any JSON value
    there (a list, an object), and only a string can name one."""
    return isinstance(target, str) and (target in TARGETS or target in allowed)


#: The role of each config section a run folder's targets build, and the targets of that role.
_ROLES: dict[str, tuple[str, tuple[str, ...]]] = {
    "dataset": ("dataset", tuple(_defaults_target(c) for c in _DATASET_SCHEMAS)),
    "model": ("model", tuple(_defaults_target(c) for c in _MODEL_SCHEMAS)),
    "optimizer": ("optimizer", _OPTIMIZERS),
}


def check_run_config(
    config: Mapping[str, Any], source: str, allowed: set[str] | frozenset[str] = frozenset()
) -> None:
    """Checks a config read back from a run folder (``source``) before anything is built from
    it: every ``_target_`` registered (``check_registered``), each section's target of its role
    (a model a model, not an optimizer; ``allowed`` targets may stand for a model), then the
    schema checks ``foldexp train`` makes at compose time (``check_config``). Errors name
    ``source`` and the key. A run folder's config is written resolved, so an interpolation in
    it (``${oc.env:HOME}``, any resolver) was put there by hand: it is refused, never resolved
    (``_check_resolved``)."""
    _check_resolved(config, source)
    check_registered(config, source, allowed=allowed)
    for section in ("dataset", "model", "optimizer", *_GROUP_SCHEMAS, "logger"):
        if config.get(section) is not None and not isinstance(config[section], Mapping):
            raise ConfigError(f"{source}: {section} is {config[section]!r}; expected an object")
    for section, (role, targets) in _ROLES.items():
        node = config.get(section)
        if section == "model" and not isinstance(node, Mapping):
            raise ConfigError(f"{source}: config has no model section")
        if not isinstance(node, Mapping) or "_target_" not in node:
            continue
        target = node["_target_"]
        if target not in targets and not (section == "model" and target in allowed):
            raise ConfigError(
                f"{source}: {section}._target_={target!r} is not a foldexp {role}; the "
                f"{role}s are {', '.join(targets)}"
            )
    try:
        check_config(config, files=False)  # predict needs none of them; eval checks its own
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def _check_resolved(node: Any, source: str, path: str = "") -> None:
    """Refuses any ``${`` in a run folder's config (values and keys, at any depth): OmegaConf
    would resolve it on first access, reading the environment (``oc.env``) or other keys, and
    the range checks pass over interpolations."""
    items = node.items() if isinstance(node, Mapping) else enumerate(node)
    for key, value in items:
        where = f"{path}.{key}" if path and isinstance(node, Mapping) else f"{path}[{key}]"
        where = str(key) if not path else where
        if isinstance(key, str) and "${" in key or isinstance(value, str) and "${" in value:
            shown = value if isinstance(value, str) else key
            raise ConfigError(
                f"{source}: {where}={shown[:80]!r} is an interpolation; a run folder's config is "
                "stored resolved, and an interpolation found in one is never resolved (it could "
                "read the environment or other files)"
            )
        if isinstance(value, (Mapping, list)):
            _check_resolved(value, source, where)


def path_keys(target: str) -> list[str]:
    """The keys of the dataset ``target``'s schema that name files or folders (``a_path``,
    ``existing_file``): those a run folder's config holds are not followed unless named on the
    command line."""
    schema = schema_for(target)
    if schema is None:
        return []
    return [f.name for f in dataclasses.fields(schema) if f.metadata.get("path")]


def check_value(key: str, value: Any, spec: dataclasses.Field) -> None:
    """``key``'s ``value`` in the range of its schema field ``spec`` (``ConfigError`` if not)."""
    rng = spec.metadata.get("range")
    if rng is None or (isinstance(value, str) and value.startswith("${")):
        return  # an interpolation (``dataset.seed: ${seed}``) is checked where it points
    real = "float" in str(spec.type)  # a float key: the message says it must be finite
    if value is None:
        if spec.metadata.get("none_ok"):
            return
        raise ConfigError(f"{key}=null; expected a number with {rng.describe(real)}")
    length = spec.metadata.get("length")
    if length is not None and not (
        isinstance(value, (list, ListConfig))
        and len(value) == length
        and not any(isinstance(v, (list, ListConfig, Mapping)) for v in value)
    ):
        raise ConfigError(
            f"{key}={value}; expected a list of {length} numbers, each {rng.describe()}"
        )
    for v in _numbers(value):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not rng.allows(v):
            raise ConfigError(f"{key}={value}; expected {rng.describe(real)}{_too_large(v)}")


def _too_large(value: Any) -> str:
    """Why a finite Python float is refused as not finite: float32 has no such number."""
    if isinstance(value, float) and math.isfinite(value) and not schemas.is_finite(value):
        return f" (float32 holds at most {schemas.FLOAT32_MAX:.3g} in magnitude)"
    return ""


def _numbers(value: Any) -> list[Any]:
    """The elements of a (nested) list value, or the value itself: a range holds for each."""
    if isinstance(value, (list, ListConfig)):
        return [v for item in value for v in _numbers(item)]
    return [value]


def _check_node(prefix: str, node: Mapping[str, Any], schema: type) -> None:
    fields = {f.name: f for f in dataclasses.fields(schema)}
    unknown = sorted(k for k in node if k not in fields)
    if unknown:
        raise ConfigError(
            unknown_key(f"{prefix}.{unknown[0]}", f"{prefix} ({schema.__name__})", list(fields))
        )
    for key, spec in fields.items():
        if key in node:
            check_value(f"{prefix}.{key}", node[key], spec)
            _check_bool(f"{prefix}.{key}", node[key], spec)


def _check_bool(key: str, value: Any, spec: dataclasses.Field) -> None:
    """A boolean key holds true or false (or null where it may): composing makes it so, but a
    run folder's config is read from a file that may say anything (``"yes please"``)."""
    kind = str(spec.type).replace(" ", "")
    if kind not in ("bool", "bool|None") or isinstance(value, bool):
        return
    if value is None and kind == "bool|None":
        return
    if isinstance(value, str) and value.startswith("${"):
        return  # an interpolation, checked where it points
    raise ConfigError(
        f"{key}={value!r}; expected true or false" + (" or null" if kind == "bool|None" else "")
    )


def check_section(prefix: str, node: Mapping[str, Any], schema: type) -> None:
    """One config section against its schema dataclass: no unknown key, every number in its
    range (``ConfigError`` naming ``prefix.key``); for configs other than training's (the
    bench's)."""
    _check_node(prefix, node, schema)


def _check_optimizer_target(node: Mapping[str, Any]) -> None:
    """The optimizer must be one of ``TARGETS``' optimizers: a run naming another trained, and
    then ``foldexp eval`` refused its folder (``check_registered``); ``os.system`` got as far as
    Hydra's instantiation, after the data loaded."""
    target = node.get("_target_")
    if target not in _OPTIMIZERS:
        raise ConfigError(
            f"optimizer._target_={target!r} is not one of foldexp's registered optimizers; "
            f"expected one of {', '.join(_OPTIMIZERS)}"
        )


def _check_optimizer(node: Mapping[str, Any], resolved: Mapping[str, Any] | None = None) -> None:
    """A registered optimizer (``_check_optimizer_target``) given only the keys its class takes,
    each in its range: ``optimizer=adam optimizer._target_=torch.optim.SGD`` would pass Adam's
    ``betas`` to SGD, a TypeError once the model was built. SGD's Nesterov momentum needs a
    momentum and no dampening (torch refuses it only when the optimizer is built); that check
    reads ``resolved`` (the node with its interpolations resolved) where given, and passes over
    values that are not numbers, which their own checks report."""
    _check_optimizer_target(node)
    schema = _OPTIMIZER_SCHEMAS[str(node["_target_"])]
    fields = [f.name for f in dataclasses.fields(schema)]
    foreign = sorted(k for k in node if k not in fields)
    if foreign:
        key = foreign[0]
        options = _group_options("optimizer")
        having = [
            name
            for target, names in options.items()
            if key in {f.name for f in dataclasses.fields(_OPTIMIZER_SCHEMAS.get(target, object))}
            for name in names
        ]
        raise ConfigError(
            unknown_key(f"optimizer.{key}", f"{node['_target_']} ({schema.__name__})", fields)
            + (f"; {key} is a key of optimizer={', '.join(sorted(having))}" if having else "")
            + "; choose an optimizer by its group (optimizer=NAME), not by optimizer._target_"
        )
    _check_node("optimizer", node, schema)
    values = resolved if resolved is not None else node
    momentum, dampening = values.get("momentum", 0), values.get("dampening", 0)
    numbers = all(isinstance(v, (int, float)) for v in (momentum, dampening))
    if values.get("nesterov") is True and numbers and (momentum <= 0 or dampening != 0):
        raise ConfigError(
            f"optimizer.nesterov=true with optimizer.momentum={momentum} and "
            f"optimizer.dampening={dampening}; Nesterov momentum needs a momentum > 0 and "
            "dampening 0"
        )


def _model_class(target: str) -> type:
    """The class a user model's ``_target_`` names; anything but a ``torch.nn.Module`` subclass
    (a function such as ``os.system``) is refused before it is ever called."""
    import torch

    built = import_target(target)
    if not (inspect.isclass(built) and issubclass(built, torch.nn.Module)):
        raise ConfigError(
            f"model._target_={target!r} is not a model class (a torch.nn.Module subclass); "
            f"foldexp's models are {', '.join(_defaults_target(c) for c in _MODEL_SCHEMAS)}, "
            "or name a class of your own with model=custom"
        )
    return built


def _check_files(cfg: DictConfig | Mapping[str, Any], prefix: str, schema: type) -> None:
    """Every file key of ``schema`` (``foldexp.config.existing_file``) under ``prefix`` names an
    existing file, or none (null or empty)."""
    for spec in dataclasses.fields(schema):
        if not spec.metadata.get("file"):
            continue
        key = f"{prefix}.{spec.name}"
        value = _resolved(cfg, key)
        if value and not Path(str(value)).is_file():
            raise MissingFileError(f"{key}={value}; expected an existing file, or null for none")


def _resolved(cfg: DictConfig | Mapping[str, Any], key: str) -> Any:
    """``key``'s value with interpolations resolved (``${paths.data_dir}/…``); ``None`` when it
    cannot be resolved here, to be reported where it is used."""
    if isinstance(cfg, DictConfig):
        try:
            return OmegaConf.select(cfg, key, throw_on_missing=True)
        except OmegaConfBaseException:
            return None
    value: Any = cfg
    for part in key.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return None if isinstance(value, str) and "${" in value else value


def _resolved_node(cfg: DictConfig | Mapping[str, Any], key: str) -> Mapping[str, Any] | None:
    """Section ``key`` of a composed config with its interpolations resolved; ``None`` where
    that is not possible (a plain mapping, or an interpolation that does not resolve)."""
    if not isinstance(cfg, DictConfig):
        return None
    try:
        node = OmegaConf.to_container(OmegaConf.select(cfg, key), resolve=True)
    except (OmegaConfBaseException, ValueError):
        return None
    return node if isinstance(node, Mapping) else None


def _check_user_model(node: Mapping[str, Any]) -> None:
    """A model of the user's own: a ``torch.nn.Module`` class whose constructor takes its keys."""
    target = node.get("_target_")
    if not target:
        raise ConfigError("model._target_ is missing: name the model class, e.g. my_pkg.MyModel")
    params = inspect.signature(_model_class(str(target))).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return
    takes = [n for n in params if n != "self"]
    for key in node:
        if key not in ("_target_", "name") and key not in params:
            raise ConfigError(
                f"model.{key} is not a parameter of {target}; it takes {', '.join(takes)}"
            )


def physical_memory() -> int | None:
    """The machine's memory in bytes, or ``None`` where the system does not say."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None
    return total if total > 0 else None


def check_memory(need: int, what: str, fix: str) -> None:
    """Refuses what the config asks for when it would take more than the machine's memory:
    keys each in range whose product is not (``dataset.n_train`` sequences of ``max_len`` steps),
    which would otherwise fill the memory until the system kills the run. ``what`` names the
    keys and says what they make; ``fix`` what to change."""
    total = physical_memory()
    if total is not None and need > total:
        raise ConfigError(
            f"{what} take about {need / 2**30:.1f} GiB, more than the {total / 2**30:.1f} GiB "
            f"of memory of this machine; {fix}"
        )


def _check_examples(dataset: Any, model: Mapping[str, Any]) -> None:
    """A foldexp model must read the kind of examples the dataset gives (``_EXAMPLES``); a
    model of the user's own is not known, and its own ``collate`` says."""
    if not isinstance(dataset, Mapping):
        return
    gives = _EXAMPLES.get(schema_for(str(dataset.get("_target_"))))  # type: ignore[arg-type]
    reads = _EXAMPLES.get(schema_for(str(model.get("_target_"))))  # type: ignore[arg-type]
    if gives is None or reads is None or gives == reads:
        return

    def names(group: str, kind: str, schemas_: Sequence[type]) -> str:
        options = _group_options(group)
        targets = [_defaults_target(c) for c in schemas_ if _EXAMPLES.get(c) == kind]
        return ", ".join(name for t in targets for name in options.get(t, [t]))

    raise ConfigError(
        f"model {model.get('name')} ({model.get('_target_')}) reads {reads}, but dataset "
        f"{dataset.get('name')} gives {gives}; the models for {gives}: "
        f"model={names('model', gives, _MODEL_SCHEMAS)}; the datasets for {reads}: "
        f"dataset={names('dataset', reads, _DATASET_SCHEMAS)} (or an experiment= preset made "
        "for either)"
    )


def _group_options(group: str) -> dict[str, list[str]]:
    """``_target_`` → the names of the ``foldexp/conf/<group>/`` files that build it (a preset
    names another file of the group in its defaults list: ``esol`` → ``molecules_csv``)."""
    folder = Path(schemas.CONF_DIR, group)
    files = {p.stem: OmegaConf.load(p) for p in sorted(folder.glob("*.yaml"))}

    def target(name: str, depth: int = 0) -> str | None:
        node = files.get(name)
        if node is None or depth > len(files):
            return None
        if "_target_" in node:
            return str(node["_target_"])
        bases = [d for d in node.get("defaults", []) if isinstance(d, str) and d in files]
        return target(bases[0], depth + 1) if bases else None

    options: dict[str, list[str]] = {}
    for name in files:
        built = target(name)
        if built is not None:
            options.setdefault(built, []).append(name)
    return options


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


def drop_preset_model_keys(cfg: DictConfig, overrides: Sequence[str]) -> None:
    """A model of the user's own (``model=custom``) receives only its own keys: those the
    command line gives it and ``conf/model/custom.yaml``'s (``_target_``, ``name``). An
    experiment preset's keys for its own model (``experiment=text_csv`` sets
    ``model.hidden_size`` for its LSTM) are left out of ``cfg``, with a log line naming them, so
    that they neither fail the user's constructor nor reach it unasked. Call right after
    composing, with the command line's overrides."""
    model = cfg.get("model")
    if not isinstance(model, DictConfig) or OmegaConf.is_missing(model, "_target_"):
        return
    if schema_for(str(model.get("_target_"))) is not None:
        return  # a foldexp model: its schema checks the keys
    typed = {
        _typed_key(o).removeprefix("model.").split(".")[0]
        for o in overrides
        if _typed_key(o).startswith("model.")
    }
    preset = [str(k) for k in model if k not in ("_target_", "name") and k not in typed]
    if not preset:
        return
    log.info(
        "model._target_=%s: the experiment's model keys %s are for its own model and are not "
        "passed to yours (give yours its keys with +model.KEY=VALUE)",
        model.get("_target_"), ", ".join(f"model.{k}" for k in preset),
    )  # fmt: skip
    with open_dict(model):
        for key in preset:
            del model[key]


def check_config(cfg: DictConfig | Mapping[str, Any], files: bool = True) -> None:
    """Checks a composed training config; raises ``ConfigError`` naming the first bad key.
    ``files``: also that the files it names exist (off for a run folder's config, whose model
    comes back without them: its vocabulary and embeddings are saved)."""
    node = OmegaConf.to_container(cfg, resolve=False) if isinstance(cfg, DictConfig) else cfg
    check_value("seed", node.get("seed", 0), dataclasses.fields(schemas.TrainConfig)[0])
    if "optimizer" in node:
        _check_optimizer(node["optimizer"], _resolved_node(cfg, "optimizer"))
    for group, schema in _GROUP_SCHEMAS.items():
        if group in node:
            _check_node(group, node[group], schema)
    board = (node.get("logger") or {}).get("tensorboard")
    if board is not None:
        _check_node("logger.tensorboard", board, schemas.TensorBoardLoggerConfig)
    for group in ("dataset", "model"):
        sub = node.get(group)
        if not isinstance(sub, Mapping):
            continue
        schema = schema_for(str(sub.get("_target_")))
        if group == "model":
            _check_examples(node.get("dataset"), sub)
        if schema is not None:
            _check_node(group, sub, schema)
            if files:
                _check_files(cfg, group, schema)
        elif group == "model":
            _check_user_model(sub)
        else:
            raise ConfigError(
                f"dataset._target_={sub.get('_target_')!r} is not a foldexp dataset; "
                f"the datasets are {', '.join(_defaults_target(c) for c in _DATASET_SCHEMAS)}"
            )
