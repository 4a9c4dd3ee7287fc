"""A run folder read back: how its model was built, and trained runs rebuilt from their folders.

A run folder is self-contained: ``run_info.json`` holds the resolved config and the dataset's
``info`` (vocabulary, class and target names, feature sizes, target statistics) in plain JSON,
so ``load_trained`` rebuilds the model and its best weights without the training data.
``find_runs``, ``run_bundles`` and ``load_run_model`` find the runs under sweep folders and
rebuild each over its own dataset (``foldexp ensemble``; a model's ``prepare_training`` hook
through ``TrainingSetup.load_runs``). Run folders are untrusted: every config read from one
(``run_info.json`` for ``predict``/``eval``, ``results.json`` for ``ensemble`` and teachers) goes
through ``read_run_config`` before anything is built from it — every ``_target_`` in foldexp's
registry and of its role, every value in its schema's range (``check_run_config``) — and the
model's shapes are checked against the checkpoint's before anything is allocated
(``build_fitting_model``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from foldexp.config import MAX_CLASSES, MAX_WIDTH
from foldexp.config.checks import check_run_config
from foldexp.config.errors import ConfigError
from foldexp.config.molecule_columns import MAX_MOLECULES
from foldexp.experiments.build import build_dataset, build_model, meta_model, plain_config
from foldexp.kernels import flush_denormals
from foldexp.train.artifacts import read_verified_json, write_json
from foldexp.train.checkpoint import CorruptFileError, read_checkpoint, rng_state, set_rng_state

__all__ = [
    "RUN_INFO",
    "RunSetup",
    "TrainedRun",
    "build_fitting_model",
    "dataset_key",
    "decode_info",
    "encode_info",
    "find_runs",
    "load_run_model",
    "load_trained",
    "prepare_for_training",
    "read_run_config",
    "run_bundles",
    "write_run_info",
]

RUN_INFO = "run_info.json"


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


# The counts a run's ``info`` may hold, and their bounds: each sizes a list, an array or a layer
# once the model is built, so an absurd one (num_classes = 10**12) is refused before that.
_COUNTS = {
    "num_classes": MAX_CLASSES,
    "predict_classes": MAX_CLASSES,
    "num_targets": MAX_WIDTH,
    "atom_features": MAX_WIDTH,
    "pair_features": MAX_WIDTH,
    "molecules": MAX_MOLECULES,  # SMILES columns a row (dataset.smiles_column)
}
_MAX_MATRIX = 2**31  # elements of a matrix named by its shape (pretrained vectors: rows x dims)


def _check_counts(encoded: Mapping[str, Any], source: Path) -> None:
    """Refuses a count or a matrix shape in ``info`` outside its bounds, naming the key."""
    for key, high in _COUNTS.items():
        value = encoded.get(key)
        if value is not None and (
            not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= high
        ):
            raise ConfigError(f"{source}: info.{key}={value!r:.40}; expected 1..{high}")
    for key, value in encoded.items():
        shape = value.get("__matrix_shape__") if isinstance(value, dict) else None
        if (
            isinstance(value, dict)
            and "__matrix_shape__" in value
            and not (
                isinstance(shape, list)
                and 1 <= len(shape) <= 2
                and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape)
                and math.prod(shape) <= _MAX_MATRIX
            )
        ):
            raise ConfigError(
                f"{source}: info.{key} has the shape {shape!r:.60}; expected one or two sizes, "
                f"at most {_MAX_MATRIX} elements in all"
            )


def decode_info(encoded: Mapping[str, Any], source: Path | None = None) -> dict[str, Any]:
    """The inverse of ``encode_info`` (matrices come back as zeros of their shape); the counts
    of a run folder's ``info`` (``source``) are checked first (``_check_counts``)."""
    from foldexp.data.vocab import Vocabulary

    if source is not None:
        if not isinstance(encoded, Mapping):
            raise ConfigError(f"{source}: info is not an object of the dataset's facts")
        _check_counts(encoded, source)
    out: dict[str, Any] = {}
    for key, value in encoded.items():
        if isinstance(value, dict) and "__vocabulary__" in value:
            out[key] = Vocabulary.from_dict(value["__vocabulary__"])
        elif isinstance(value, dict) and "__matrix_shape__" in value:
            out[key] = np.zeros(value["__matrix_shape__"], dtype=np.float32)
        else:
            out[key] = value
    return out


def write_run_info(
    out_dir: Path, config: Mapping[str, Any], info: Mapping[str, Any], threads: int | None = None
) -> Path:
    """Writes ``run_info.json``: what ``load_trained`` needs besides the weights, and the
    intra-op threads the run trains on (a resume takes them: ``threads.py``)."""
    data = {"config": plain_config(config), "info": encode_info(info), "threads": threads}
    return write_json(Path(out_dir) / RUN_INFO, data)


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
            f"{folder} is not a trained run: it has no {RUN_INFO}, which a run writes once its "
            "data is read and its model built (a run that failed before: see its app.log; one "
            "trained before foldexp stored it: train again)"
        )
    saved = read_verified_json(source)
    config = read_run_config(saved, source, allow_targets)
    weights = folder / "checkpoints" / checkpoint
    if not weights.is_file():
        raise FileNotFoundError(f"{folder}: no checkpoints/{checkpoint}; the run did not finish")
    info = decode_info(saved.get("info") or {}, source)
    model = build_fitting_model(config["model"], info, weights, source)
    # predict / eval compute as the run trained: denormals flushed unless it said false (weights
    # trained elsewhere may hold denormals, which would put every product on the slow path)
    device = config.get("device")
    flush_denormals(not (isinstance(device, dict) and device.get("flush_denormal") is False))
    return TrainedRun(folder, model.eval(), config, info)


def read_run_config(
    saved: Any, source: Path, allow_targets: Iterable[str] = (), need: Sequence[str] = ("model",)
) -> dict[str, Any]:
    """The config a run folder's file (``source``, read as ``saved``) records, checked in full
    before anything is built from it: the one check ``predict``, ``eval``, ``ensemble`` and
    ``model.teacher`` make (``foldexp.config.checks.check_run_config``: registered targets of their
    role, every value in its schema's range). ``need``: the sections it must have."""
    config = saved.get("config") if isinstance(saved, dict) else None
    if not isinstance(config, dict):
        raise ConfigError(f"{source}: expected an object holding the run's resolved 'config'")
    missing = [section for section in need if section not in config]
    if missing:
        raise ConfigError(f"{source}: its config has no {missing[0]} section")
    check_run_config(config, str(source), allowed=set(allow_targets))
    return config


# ---------------------------------------------------------------------- runs under sweep folders


def find_runs(
    dirs: Sequence[str | Path], allow_targets: Sequence[str] = ()
) -> list[tuple[Path, dict[str, Any]]]:
    """Each run folder under ``dirs`` (one holding ``results.json`` and ``checkpoints/best.pt``)
    with the resolved config its ``results.json`` records, sorted by seed, then path.

    The folders are untrusted: each config is checked as ``predict`` and ``eval`` check theirs
    (``read_run_config``: a ``_target_`` outside foldexp's registry and ``allow_targets``, or a
    value outside its range, is refused) before any dataset or model is built from any of them."""
    paths: set[Path] = set()
    for d in map(Path, dirs):
        if not d.exists():
            raise FileNotFoundError(f"foldexp ensemble: {d} does not exist")
        paths.update(p.parent for p in d.rglob("results.json"))
    if not paths:
        raise FileNotFoundError(
            f"foldexp ensemble: no results.json under {', '.join(map(str, dirs))}"
        )
    runs = []
    for run in paths:
        if not (run / "checkpoints" / "best.pt").exists():
            raise FileNotFoundError(
                f"foldexp ensemble: {run} has results.json but no checkpoints/best.pt"
            )
        source = run / "results.json"
        config = read_run_config(
            read_verified_json(source), source, allow_targets, need=("dataset", "model")
        )
        runs.append((run, config))
    return sorted(runs, key=lambda rc: (rc[1].get("seed", 0), str(rc[0])))


def dataset_key(config: dict[str, Any]) -> str:
    """The key of a run's dataset config in ``run_bundles``' mapping."""
    return json.dumps(config["dataset"], sort_keys=True)


def run_bundles(
    runs: list[tuple[Path, dict[str, Any]]],
    split: str,
    mismatch: Callable[[Path, str], str],
    expected: Sequence[Any] | None = None,
) -> tuple[dict[str, Any], list[Any]]:
    """One dataset bundle per distinct dataset config of ``runs`` (by ``dataset_key``), and the
    split's examples, which every bundle must give alike (and equal to ``expected`` if given).

    A bundle that differs raises ``ValueError(mismatch(run, keys))``, ``keys`` naming the
    ``dataset.*`` keys where its run's config differs from the first run's.
    """
    bundles: dict[str, Any] = {}
    examples = expected
    first = runs[0][1]
    for run, config in runs:
        if dataset_key(config) in bundles:
            continue
        bundle = bundles[dataset_key(config)] = build_dataset(config["dataset"])
        if examples is None:
            examples = list(getattr(bundle, split))
        elif list(getattr(bundle, split)) != list(examples):
            keys = ", ".join(
                f"dataset.{k}" for k in _differences(config["dataset"], first["dataset"])
            )
            raise ValueError(mismatch(run, keys))
    return bundles, list(examples or [])


def _differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


def load_run_model(run: Path, config: dict[str, Any], bundle: Any) -> Any:
    """The run's model, rebuilt from its resolved ``config`` over ``bundle`` (its dataset), with
    the weights of ``checkpoints/best.pt``, in evaluation mode."""
    weights = run / "checkpoints" / "best.pt"
    return build_fitting_model(config["model"], bundle.info, weights, run / "results.json").eval()


def build_fitting_model(
    model_cfg: Mapping[str, Any], info: Mapping[str, Any], weights: Path, source: Path
) -> torch.nn.Module:
    """The model ``model_cfg`` (read from ``source``) builds, with the weights of the checkpoint
    ``weights``.

    The model is first built on the meta device (no memory) and its parameter shapes compared
    with the checkpoint's: a config that does not fit its weights (an edited size, an absurd one
    that would allocate petabytes) fails naming both files, the parameter and the shapes,
    before a single real tensor is allocated.
    """
    payload = read_checkpoint(weights, need=("model", "progress"))
    state = payload["model"]
    if not isinstance(state, Mapping) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
    ):
        raise CorruptFileError(f"{weights} is not a foldexp checkpoint: its model is not a state")
    saved = {k: tuple(v.shape) for k, v in state.items()}
    shapes = _from_info(source, lambda: _meta_shapes(model_cfg, info))
    if shapes is not None:
        _check_fit(shapes, saved, weights, source)
    model = _from_info(source, lambda: build_model(model_cfg, info))
    _check_fit({k: tuple(v.shape) for k, v in model.state_dict().items()}, saved, weights, source)
    model.load_state_dict(state)
    return model


def _from_info(source: Path, build: Callable[[], Any]) -> Any:
    """``build()``, a model built from ``source``'s info; the constructor's refusal of it (info
    lacking what it takes, or lists of another length than its counts) as one line naming
    ``source``."""
    try:
        return build()
    except ConfigError:
        raise
    except (TypeError, ValueError) as exc:
        detail = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
        raise ConfigError(f"{source}: its model cannot be built from its info ({detail})") from None


def _meta_shapes(
    model_cfg: Mapping[str, Any], info: Mapping[str, Any]
) -> dict[str, tuple[int, ...]] | None:
    """The shapes of the model's state, built on the meta device; ``None`` for a model (of a
    user's own) whose constructor needs real tensors: its shapes are checked once it is built."""
    model = meta_model(model_cfg, info)
    if model is None:
        return None
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def _check_fit(
    wanted: Mapping[str, tuple[int, ...]],
    saved: Mapping[str, tuple[int, ...]],
    weights: Path,
    source: Path,
) -> None:
    """Refuses a checkpoint whose parameters are not those of the model the config builds."""
    start = f"{weights} does not fit the model configured in {source}"
    for name, shape in wanted.items():
        if name not in saved:
            raise ConfigError(f"{start}: the checkpoint has no parameter {name} {list(shape)}")
        if saved[name] != shape:
            raise ConfigError(
                f"{start}: parameter {name} has shape {list(saved[name])} in the checkpoint but "
                f"{list(shape)} in the model (was the config edited?)"
            )
    extra = sorted(set(saved) - set(wanted))
    if extra:
        raise ConfigError(
            f"{start}: the model has no parameter {extra[0]}, which the checkpoint holds"
        )


@dataclass
class RunSetup:
    """The ``TrainingSetup`` (``foldexp.models.contract``) a run hands its model's
    ``prepare_training`` hook: its training examples, and trained runs that saw the same ones."""

    train: Sequence[Any]
    batch_size: int

    def load_runs(
        self, dirs: Sequence[str | Path], mismatch: Callable[[Path, str], str]
    ) -> Iterator[tuple[Path, torch.nn.Module]]:
        runs = find_runs(dirs)
        bundles, _ = run_bundles(runs, "train", mismatch, expected=self.train)
        for run, config in runs:
            yield run, load_run_model(run, config, bundles[dataset_key(config)])

    def trained_model(self, folder: str | Path) -> torch.nn.Module:
        """One trained run's model, whatever data it saw (``model.init_from``), checked as
        ``predict`` checks it (``load_trained``: checksums, registered targets, shapes)."""
        return load_trained(folder).model


def prepare_for_training(model: torch.nn.Module, setup: RunSetup) -> None:
    """Calls the model's optional ``prepare_training`` hook (``foldexp.models.contract``), then
    puts every RNG back: a hook that builds models draws from it, and a run must be as
    reproducible and resumable with the hook as without."""
    prepare = getattr(model, "prepare_training", None)
    if not callable(prepare):
        return
    saved = rng_state()
    try:
        prepare(setup)
    finally:
        set_rng_state(saved)
