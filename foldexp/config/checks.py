"""Checking a config's values against the schemas beside this module.

``check_config(cfg)`` runs right after Hydra composes a training config, before any data is read:
every numeric key with a range in its schema (``foldexp.config.ranged``) must lie in it;
``optimizer._target_`` and ``dataset._target_`` must be registered ones
(``foldexp.config.targets.TARGETS``), and a model of the user's own a ``torch.nn.Module`` class;
the ``dataset`` and ``model`` nodes may hold only the keys their schema (or, for a model of the
user's own, its constructor) takes — so ``+dataset.pth=…`` fails naming the keys that exist
instead of being ignored; a file key (``dataset.word_vectors``) must name an existing file; the
model must read the kind of examples the dataset gives. ``check_run_config`` checks a config
read back from a run folder in full before a model is rebuilt from it: no interpolation,
registered targets of the right role (a model is a model), then ``check_config``'s checks.
Errors are ``ConfigError``s naming the key, the value and what is allowed.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException, ValidationError

from foldexp import config as schemas
from foldexp.config.errors import ConfigError, MissingFileError, unknown_key
from foldexp.config.molecule_columns import check_smiles_columns
from foldexp.config.targets import (
    DATASET_SCHEMAS,
    EXAMPLES,
    GROUP_SCHEMAS,
    MODEL_SCHEMAS,
    OPTIMIZER_SCHEMAS,
    OPTIMIZERS,
    ROLES,
    check_registered,
    defaults_target,
    group_options,
    import_target,
    schema_for,
    undefined_class,
)

__all__ = ["check_config", "check_run_config", "check_section", "check_value"]


def check_config(cfg: DictConfig | Mapping[str, Any], files: bool = True) -> None:
    """Checks a composed training config; raises ``ConfigError`` naming the first bad key.
    ``files``: also that the files it names exist (off for a run folder's config, whose model
    comes back without them: its vocabulary and embeddings are saved)."""
    node = OmegaConf.to_container(cfg, resolve=False) if isinstance(cfg, DictConfig) else cfg
    check_value("seed", node.get("seed", 0), dataclasses.fields(schemas.TrainConfig)[0])
    if "optimizer" in node:
        _check_optimizer(node["optimizer"], _resolved_node(cfg, "optimizer"))
    for group, schema in GROUP_SCHEMAS.items():
        if group in node:
            _check_node(group, node[group], schema, cfg)
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
            check_smiles_columns(node.get("dataset"), sub)
        if schema is not None:
            _check_node(group, sub, schema, cfg)
            _check_folds(group, sub)
            if files:
                _check_files(cfg, group, schema)
        elif group == "model":
            _check_user_model(sub)
        else:
            raise ConfigError(
                f"dataset._target_={sub.get('_target_')!r} is not a foldexp dataset; "
                f"the datasets are {', '.join(defaults_target(c) for c in DATASET_SCHEMAS)}"
            )


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
    for section in ("dataset", "model", "optimizer", *GROUP_SCHEMAS, "logger"):
        if config.get(section) is not None and not isinstance(config[section], Mapping):
            raise ConfigError(f"{source}: {section} is {config[section]!r}; expected an object")
    for section, (role, targets) in ROLES.items():
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


def _check_node(prefix: str, node: Mapping[str, Any], schema: type, root: Any = None) -> None:
    """``node``'s keys against ``schema``; an interpolation (``model.hidden_size: ${seed}``) is
    checked as it resolves in ``root`` (the composed config), where it can be resolved."""
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
            _check_interpolated(f"{prefix}.{key}", node[key], spec, root)


def _check_interpolated(key: str, value: Any, spec: dataclasses.Field, root: Any) -> None:
    """An interpolated value checked as it resolves: ``trainer.batch_size='${seed}' seed=0``
    had passed every check and failed as a traceback once the data and model were built."""
    if not (isinstance(value, str) and "${" in value and isinstance(root, DictConfig)):
        return
    try:
        resolved = OmegaConf.select(root, key, throw_on_missing=True)
    except ValidationError as exc:  # it resolves to a value of another type: one line
        detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ConfigError(f"{key}={value}: {detail}") from None
    except (OmegaConfBaseException, ValueError):
        return  # it does not resolve here: reported where it is used
    if isinstance(resolved, (DictConfig, ListConfig)):
        resolved = OmegaConf.to_container(resolved, resolve=True)
    try:
        check_value(key, resolved, spec)
        _check_bool(key, resolved, spec)
    except ConfigError as exc:
        raise ConfigError(f"{exc} (it is {value})") from None


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
    if target not in OPTIMIZERS:
        raise ConfigError(
            f"optimizer._target_={target!r} is not one of foldexp's registered optimizers; "
            f"expected one of {', '.join(OPTIMIZERS)}"
        )


def _check_optimizer(node: Mapping[str, Any], resolved: Mapping[str, Any] | None = None) -> None:
    """A registered optimizer (``_check_optimizer_target``) given only the keys its class takes,
    each in its range: ``optimizer=adam optimizer._target_=torch.optim.SGD`` would pass Adam's
    ``betas`` to SGD, a TypeError once the model was built. SGD's Nesterov momentum needs a
    momentum and no dampening (torch refuses it only when the optimizer is built); that check
    reads ``resolved`` (the node with its interpolations resolved) where given, and passes over
    values that are not numbers, which their own checks report."""
    _check_optimizer_target(node)
    schema = OPTIMIZER_SCHEMAS[str(node["_target_"])]
    fields = [f.name for f in dataclasses.fields(schema)]
    foreign = sorted(k for k in node if k not in fields)
    if foreign:
        key = foreign[0]
        options = group_options("optimizer")
        having = [
            name
            for target, names in options.items()
            if key in {f.name for f in dataclasses.fields(OPTIMIZER_SCHEMAS.get(target, object))}
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

    why = undefined_class(target)
    if why is not None:  # said before the module is imported (and its import code run)
        raise ConfigError(f"model._target_={target!r} is not a model class: {why}")
    built = import_target(target)
    if not (inspect.isclass(built) and issubclass(built, torch.nn.Module)):
        raise ConfigError(
            f"model._target_={target!r} is not a model class (a torch.nn.Module subclass); "
            f"foldexp's models are {', '.join(defaults_target(c) for c in MODEL_SCHEMAS)}, "
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
            source = spec.metadata.get("source")
            raise MissingFileError(
                f"{key}={value}; expected an existing file, or null for none"
                + (f"; {source}" if source else "")
            )


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


def _check_folds(group: str, node: Mapping[str, Any]) -> None:
    """``dataset.fold`` must name one of ``dataset.folds`` (two keys: no one range holds it)."""
    folds, fold = node.get("folds"), node.get("fold")
    if group == "dataset" and isinstance(folds, int) and isinstance(fold, int) and fold >= folds:
        raise ConfigError(
            f"dataset.fold={fold} is out of range: expected 0..{folds - 1} (dataset.folds={folds})"
        )


def _check_examples(dataset: Any, model: Mapping[str, Any]) -> None:
    """A foldexp model must read the kind of examples the dataset gives (``EXAMPLES``); a
    model of the user's own is not known, and its own ``collate`` says."""
    if not isinstance(dataset, Mapping):
        return
    gives = EXAMPLES.get(schema_for(str(dataset.get("_target_"))))  # type: ignore[arg-type]
    reads = EXAMPLES.get(schema_for(str(model.get("_target_"))))  # type: ignore[arg-type]
    if gives is None or reads is None or gives == reads:
        return

    def names(group: str, kind: str, schemas_: Sequence[type]) -> str:
        options = group_options(group)
        targets = [defaults_target(c) for c in schemas_ if EXAMPLES.get(c) == kind]
        return ", ".join(name for t in targets for name in options.get(t, [t]))

    raise ConfigError(
        f"model {model.get('name')} ({model.get('_target_')}) reads {reads}, but dataset "
        f"{dataset.get('name')} gives {gives}; the models for {gives}: "
        f"model={names('model', gives, MODEL_SCHEMAS)}; the datasets for {reads}: "
        f"dataset={names('dataset', reads, DATASET_SCHEMAS)} (or an experiment= preset made "
        "for either)"
    )
