"""The registry of targets a config may build: foldexp's datasets, models and optimizers.

``TARGETS`` maps each registered ``_target_`` to its schema (``None`` for optimizers, whose keys
the optimizer schemas check). A config read back from a run folder (``results.json``,
``run_config.json``) is untrusted: ``check_registered`` refuses any ``_target_`` outside the
registry, anywhere in it, naming the file and the key, so a crafted run folder cannot make
``foldexp ensemble``/``predict`` call arbitrary code; ``import_target`` is the one place a
dotted target becomes a callable. Also here: the kind of examples each dataset gives and each
model reads (``EXAMPLES``), the schema defaults of a stored config (``schema_defaults``), the
file keys of a dataset (``path_keys``) and the group files that build each target
(``group_options``).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping
from enum import Enum
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from foldexp import config as schemas
from foldexp.config.errors import ConfigError

__all__ = [
    "DATASET_SCHEMAS",
    "EXAMPLES",
    "GROUP_SCHEMAS",
    "MODEL_SCHEMAS",
    "OPTIMIZERS",
    "OPTIMIZER_SCHEMAS",
    "ROLES",
    "TARGETS",
    "check_registered",
    "defaults_target",
    "group_options",
    "import_target",
    "path_keys",
    "plain",
    "schema_defaults",
    "schema_for",
    "undefined_class",
]


def defaults_target(cls: type) -> str:
    return next(f.default for f in dataclasses.fields(cls) if f.name == "_target_")


DATASET_SCHEMAS = (
    schemas.CalculatorDataConfig,
    schemas.SSTDataConfig,
    schemas.SSTSentencesDataConfig,
    schemas.MoleculeDataConfig,
    schemas.MarkedSequencesDataConfig,
    schemas.TreesPTBDataConfig,
    schemas.TextCSVDataConfig,
)
MODEL_SCHEMAS = (
    schemas.TreeLSTMModelConfig,
    schemas.SequenceLSTMModelConfig,
    schemas.WeaveModelConfig,
    schemas.AttentionModelConfig,
    schemas.ChildSumTreeLSTMModelConfig,
    schemas.CalcDecodeModelConfig,
    schemas.DMPNNModelConfig,
)
#: Each registered optimizer's schema: its keys are what its YAML file may set.
OPTIMIZER_SCHEMAS: dict[str, type] = {
    "torch.optim.Adam": schemas.AdamConfig,
    "torch.optim.AdamW": schemas.AdamConfig,
    "torch.optim.Adagrad": schemas.AdagradConfig,
    "torch.optim.SGD": schemas.SGDConfig,
}
OPTIMIZERS = tuple(OPTIMIZER_SCHEMAS)

#: What each dataset's examples are, and what each model reads. A model given examples of another
#: kind failed in its first batch, after the data had loaded: seq_lstm on calculator trees with
#: "cannot unpack non-iterable Tree object", weave with a TypeError about atom_features.
EXAMPLES: dict[type, str] = {
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

TARGETS: dict[str, type | None] = {
    **{defaults_target(c): c for c in (*DATASET_SCHEMAS, *MODEL_SCHEMAS)},
    **dict.fromkeys(OPTIMIZERS),
}

GROUP_SCHEMAS = {
    "trainer": schemas.TrainerConfig,
    "device": schemas.DeviceConfig,
}

plain = schemas.enum_value  # an enum config value as its string; the one home is foldexp.config


def schema_defaults(config: Mapping[str, Any]) -> dict[str, Any]:
    """``section.key`` → the schema's default, for the sections of ``config`` that have a schema
    (``trainer``, ``device``; ``optimizer``, ``dataset`` and ``model`` by their ``_target_``), as
    a stored config holds values (enums as strings). A key a newer foldexp added is absent from
    an older run's stored config: the run had its default."""
    sections: dict[str, type | None] = dict(GROUP_SCHEMAS)
    for section, table in (
        ("optimizer", OPTIMIZER_SCHEMAS),
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


def undefined_class(target: str) -> str | None:
    """Why ``target`` (``pkg.module.Class``) cannot name a class of its module, found without
    running the module: its source (``find_spec``, which runs parent packages only) must define
    the name at top level as a class or import it. ``None`` when it may; a refusal here means
    the module's import side effects never ran (``model._target_=this.s`` had run ``this``)."""
    import ast
    import importlib.util

    module, _, name = target.rpartition(".")
    if not module or not name.isidentifier():
        return "expected pkg.module.Class"
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError, AttributeError) as exc:
        return f"its module cannot be found ({exc})"
    origin = getattr(spec, "origin", None) if spec is not None else None
    if origin is None or not str(origin).endswith(".py"):
        return f"{module} is not a module of Python source" if spec else f"no module {module}"
    try:
        tree = ast.parse(Path(origin).read_bytes(), filename=origin)
    except (OSError, SyntaxError, ValueError) as exc:
        return f"{origin} cannot be read ({exc})"
    nodes = list(ast.walk(tree))  # (a class under ``if`` or ``try`` counts too)
    names = {n.name for n in nodes if isinstance(n, ast.ClassDef)} | {
        (alias.asname or alias.name).split(".")[0]
        for n in nodes
        if isinstance(n, (ast.Import, ast.ImportFrom))
        for alias in n.names
    }
    if name in names or "*" in names:  # ``from .models import *``: it may come from there
        return None
    return f"{module} defines or imports no class {name}"


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
ROLES: dict[str, tuple[str, tuple[str, ...]]] = {
    "dataset": ("dataset", tuple(defaults_target(c) for c in DATASET_SCHEMAS)),
    "model": ("model", tuple(defaults_target(c) for c in MODEL_SCHEMAS)),
    "optimizer": ("optimizer", OPTIMIZERS),
}


def path_keys(target: str) -> list[str]:
    """The keys of the dataset ``target``'s schema that name files or folders (``a_path``,
    ``existing_file``): those a run folder's config holds are not followed unless named on the
    command line."""
    schema = schema_for(target)
    if schema is None:
        return []
    return [f.name for f in dataclasses.fields(schema) if f.metadata.get("path")]


def group_options(group: str) -> dict[str, list[str]]:
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
