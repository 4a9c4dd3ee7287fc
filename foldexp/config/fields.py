"""Schema field helpers: valid ranges of numeric settings, and enum values as plain strings.

A schema field made with ``ranged`` (or ``positive``, ``non_negative``, ``probability``,
``learning_rate``, ``decay``, ``rng_seed``, ``width``) carries
its valid interval in the dataclass field's metadata; ``config.checks.check_config`` enforces
it when a config is composed, naming the key, the value and the range. Every integer key has an
upper bound too (``tests/reliability/test_config_bounds.py`` walks the schemas): a count a
user would not wait for, or memory no machine has, fails before anything runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

__all__ = [
    "FLOAT32_MAX",
    "FLOAT32_TINY",
    "MAX_BATCH_SIZE",
    "MAX_CLASSES",
    "MAX_EPOCHS",
    "MAX_EXAMPLES",
    "MAX_GENERATED",
    "MAX_LAYERS",
    "MAX_LR",
    "MAX_SEED",
    "MAX_SEQUENCE_LENGTH",
    "MAX_STEPS",
    "MAX_WEIGHT_DECAY",
    "MAX_WIDTH",
    "Range",
    "count",
    "a_path",
    "is_finite",
    "decay",
    "enum_value",
    "existing_file",
    "WORD_VECTORS_SOURCE",
    "learning_rate",
    "non_negative",
    "positive",
    "probability",
    "ranged",
    "rng_seed",
    "width",
]


#: The largest float32. A float setting ends up in float32 tensors (a learning rate in a fused
#: optimizer step, a bias in a weight), where anything larger in magnitude is inf.
FLOAT32_MAX = 3.4028234663852886e38
#: The smallest normal float32. A smaller positive setting is 0 in float32 (or flushed to 0 as
#: a denormal, ``device.flush_denormal``): an ``eps`` that small divided 0 by 0 into NaN weights.
FLOAT32_TINY = 1.1754943508222875e-38


def is_finite(value: float) -> bool:
    """Whether a number is finite as a float32: NaN, ±inf and beyond ±3.4e38 are not. NaN fails
    here because every comparison with it is False, so no bound could ever refuse it."""
    return abs(value) <= FLOAT32_MAX


@dataclass(frozen=True)
class Range:
    """The valid interval of a numeric config value (bounds ``None`` are open).

    A float value must also be finite (``is_finite``): NaN compares False with any bound and
    would pass them all, and no setting means "no limit" by inf (each has its own off value,
    usually 0)."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None

    def allows(self, value: float) -> bool:
        if isinstance(value, float) and not is_finite(value):
            return False
        return not (
            (self.ge is not None and value < self.ge)
            or (self.gt is not None and value <= self.gt)
            or (self.le is not None and value > self.le)
            or (self.lt is not None and value >= self.lt)
        )

    def describe(self, real: bool = False) -> str:
        """E.g. ``a value > 0``, ``0 <= value < 1``; ``real`` (a float key): ``a finite value >
        0``, as a bound on one side only leaves the other to infinity."""
        low = self._lower()
        high = self._upper()
        if low and high:
            return f"{low[1]} {'<=' if low[0] == '>=' else '<'} value {high[0]} {high[1]}"
        some = "a finite value" if real else "a value"
        bound = low or high
        return f"{some} {bound[0]} {bound[1]}" if bound else some

    def _lower(self) -> tuple[str, float] | None:
        """The lower bound as (operator on the value, bound), or ``None``."""
        if self.ge is not None:
            return (">=", self.ge)
        return (">", self.gt) if self.gt is not None else None

    def _upper(self) -> tuple[str, float] | None:
        """The upper bound as (operator on the value, bound), or ``None``."""
        if self.le is not None:
            return ("<=", self.le)
        return ("<", self.lt) if self.lt is not None else None


def ranged(
    default: Any,
    *,
    ge=None,
    gt=None,
    le=None,
    lt=None,
    none_ok: bool = False,
    length: int | None = None,
) -> Any:
    """A schema field whose numeric value (or every element of a list value) must lie in the
    range; ``config.checks.check_config`` enforces it when the config is composed. ``length``:
    the value is a list of exactly that many numbers (Adam's two betas)."""
    meta = {"range": Range(ge, gt, le, lt), "none_ok": none_ok, "length": length}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)


def positive(default: Any) -> Any:
    """> 0 (an integer key: >= 1)."""
    return ranged(default, gt=0)


def non_negative(default: Any) -> Any:
    """>= 0 (for most such keys 0 turns the feature off)."""
    return ranged(default, ge=0)


def probability(default: Any, none_ok: bool = False) -> Any:
    """0 <= p < 1 (a dropout rate, a mixing weight)."""
    return ranged(default, ge=0, lt=1, none_ok=none_ok)


#: Learning rates are below this. The largest in published use are SGD's: 1 for LSTM language
#: models (Zaremba et al. 2014), 30 for AWD-LSTM (Merity et al. 2018); Adam's are ~1e-3 and
#: Adagrad's 0.05 (TF Fold, Tai et al. 2015). 100 and more is a mistake, typically a dropped minus
#: (1e3 for 1e-3, 1e2 for 1e-2), and 1e30 diverged at the first step instead of failing here.
MAX_LR = 100
#: Weight decay is below this. Published values are 1e-4 (Adagrad, Tai et al. 2015) to 0.1
#: (AdamW), 1 at the most (AdamW in grokking studies, Power et al. 2022): SGD's step multiplies a
#: weight by 1 - lr * weight_decay, which changes sign for lr * weight_decay > 1. 10 and more is a
#: mistake, such as a dropped minus (1e4 for 1e-4).
MAX_WEIGHT_DECAY = 10


def learning_rate(default: Any, none_ok: bool = False) -> Any:
    """0 < lr < ``MAX_LR``."""
    return ranged(default, gt=0, lt=MAX_LR, none_ok=none_ok)


def decay(default: Any, none_ok: bool = False) -> Any:
    """0 <= weight decay < ``MAX_WEIGHT_DECAY`` (0 = none)."""
    return ranged(default, ge=0, lt=MAX_WEIGHT_DECAY, none_ok=none_ok)


#: Seeds are 32-bit: numpy's legacy seeding takes [0, 2**32), and the loop seeds each epoch's
#: shuffle with seed * 1000 + epoch, which overflowed torch's int64 at the first step for seeds
#: near 2**63 (after the data had loaded and the model had been built).
MAX_SEED = 2**32 - 1
#: The widest layer or embedding: above every published model's (GPT-3's 12288, the 8192-unit
#: LSTM of Jozefowicz et al. 2016). Whether a model of allowed sizes fits the machine's memory
#: depends on the vocabulary too: it is checked before the first step (``train/preflight.py``).
MAX_WIDTH = 65536
#: The most stacked layers: above the deepest graph networks published (1001, Li et al. 2021);
#: 100000 weave layers took minutes just to build.
MAX_LAYERS = 1024
#: The most classes: every node's logits and the output layer grow with it; 1e8 composed and the
#: run was killed for memory at its first batch.
MAX_CLASSES = 100_000
#: The most examples a synthetic dataset generates (calculator trees, marked sequences): 1e7 take
#: about 10 GB and minutes to generate; 1e9 ran until killed, 1e12 failed allocating 7 TB.
MAX_GENERATED = 10_000_000
#: The longest generated sequence: 10 times the longest of Raffel & Ellis (2016), 10000 steps.
MAX_SEQUENCE_LENGTH = 100_000
#: The most epochs: at one second an epoch, 11.6 days. ``trainer.epochs=1000000000000`` was
#: accepted and would have run for ever; more than this is a typo (a dropped decimal point).
MAX_EPOCHS = 1_000_000
#: The most optimizer steps a step count may name (``trainer.max_steps``, warm-up, decay,
#: checkpoint and logging intervals): at one millisecond a step, 11.6 days.
MAX_STEPS = 1_000_000_000
#: The most inputs in one batch: every example of the largest generated dataset
#: (``MAX_GENERATED``); ``trainer.batch_size=99999999999999999999`` was accepted.
MAX_BATCH_SIZE = MAX_GENERATED
#: The most examples (or a word's occurrences) a count over a dataset file may name
#: (``dataset.limit``, ``dataset.min_count``): more than any file foldexp reads holds.
MAX_EXAMPLES = 1_000_000_000


def count(default: Any, high: int, low: int = 1) -> Any:
    """An integer key (or a list of them): ``low <= value <= high`` (every integer key has a
    ceiling)."""
    return ranged(default, ge=low, le=high)


def rng_seed(default: Any) -> Any:
    """0 <= seed <= ``MAX_SEED``."""
    return ranged(default, ge=0, le=MAX_SEED)


def width(default: Any) -> Any:
    """A layer or embedding size: 0 < size <= ``MAX_WIDTH``."""
    return ranged(default, gt=0, le=MAX_WIDTH)


def existing_file(default: str | None = None, source: str = "") -> Any:
    """A schema field naming a file that must exist (``null`` = none): ``check_config`` looks
    before any data is read, so a typo fails naming the key, not as a bare ``[Errno 2]``.
    ``source``: where such a file comes from, told when it is missing."""
    return field(default=default, metadata={"file": True, "path": True, "source": source})


#: where word vectors come from (``dataset.word_vectors``), told when the file is missing
WORD_VECTORS_SOURCE = (
    "word vectors are a GloVe text file (.txt or .gz, a word and its numbers a line); "
    "sst_treelstm_glove reads <data_dir>/wordvec/glove.6B.50d.sst_vocab.txt.gz, Stanford's "
    "GloVe 6B 50-d vectors (https://nlp.stanford.edu/projects/glove/, glove.6B.zip) cut to "
    "SST's words, from the data folder (FOLDEXP_DATA, or paths.data_dir=DIR); the whole "
    "glove.6B.50d.txt works too: dataset.word_vectors=PATH"
)


def a_path(default: Any) -> Any:
    """A schema field naming a file or folder: one that a run folder's config holds is not
    followed by ``foldexp eval`` unless the command line names it (``config.targets.path_keys``)."""
    return field(default=default, metadata={"path": True})


def enum_value(value: Any) -> str:
    """A choice from a config as its plain string.

    OmegaConf keeps a schema's enum fields as enum members (``DeviceName.cpu``), whose ``str`` is
    the member's name with its class; a plain string (a config read back from a run folder, or
    built by hand) passes through unchanged.
    """
    return str(value.value) if isinstance(value, Enum) else str(value)
