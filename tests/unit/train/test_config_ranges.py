"""Config values outside their schema's range fail at compose time, naming key, value and range.

Each case here once passed composition and failed late (after the data loaded) with a message
that did not name the key, or not at all: NaN passed every bound (comparisons with it are
False), inf passed ``> 0``, counts had no upper bound.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from foldexp.config import FLOAT32_MAX, Range
from foldexp.config.errors import ConfigError
from foldexp.train.app import compose_config


def _refused(overrides: list[str]) -> str:
    """The one-line message composing ``overrides`` fails with."""
    with pytest.raises(ConfigError) as err:
        compose_config(overrides)
    message = str(err.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    "override, expected",
    [
        ("optimizer.lr=nan", "optimizer.lr=nan; expected 0 < value < 100"),
        ("optimizer.lr=inf", "optimizer.lr=inf; expected 0 < value < 100"),
        ("optimizer.weight_decay=nan", "optimizer.weight_decay=nan; expected 0 <= value < 10"),
        ("trainer.grad_clip=nan", "trainer.grad_clip=nan; expected a finite value >= 0"),
        ("trainer.grad_clip=inf", "trainer.grad_clip=inf; expected a finite value >= 0"),
        ("trainer.ema_decay=nan", "trainer.ema_decay=nan; expected 0 <= value < 1"),
        ("trainer.log_every_s=nan", "trainer.log_every_s=nan; expected a finite value >= 0"),
        ("model.forget_bias=nan", "model.forget_bias=nan; expected -100 <= value <= 100"),
        ("model.forget_bias=inf", "model.forget_bias=inf; expected -100 <= value <= 100"),
        ("model.forget_bias=-inf", "model.forget_bias=-inf; expected -100 <= value <= 100"),
        ("model.dropout=nan", "model.dropout=nan; expected 0 <= value < 1"),
        ("model.embedding_lr=nan", "model.embedding_lr=nan; expected 0 < value < 100"),
    ],
)
def test_nan_and_inf_fail_at_compose_time(override: str, expected: str) -> None:
    assert _refused([override]) == expected


def test_a_float_beyond_float32_is_not_finite() -> None:
    """1e308 is a finite double but inf in the float32 tensors it reaches."""
    message = _refused(["trainer.grad_clip=1e308"])
    assert message.startswith("trainer.grad_clip=1e+308; expected a finite value >= 0 (float32")


def test_finite_values_still_compose() -> None:
    cfg = compose_config(["trainer.grad_clip=3e38", "model.forget_bias=-2.5", "optimizer.lr=1"])
    assert cfg.trainer.grad_clip == 3e38 and cfg.model.forget_bias == -2.5


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), 2 * FLOAT32_MAX])
@pytest.mark.parametrize("rng", [Range(), Range(gt=0), Range(le=1), Range(ge=-1, le=1)])
def test_every_range_refuses_non_finite_floats(rng: Range, value: float) -> None:
    assert not rng.allows(value)


@pytest.mark.parametrize(
    "rng, text",
    [
        (Range(gt=0), "a finite value > 0"),
        (Range(ge=0, lt=1), "0 <= value < 1"),
        (Range(gt=0, le=5), "0 < value <= 5"),
        (Range(), "a finite value"),
    ],
)
def test_a_float_range_says_finite_where_a_side_is_open(rng: Range, text: str) -> None:
    assert rng.describe(real=True) == text
    assert rng.describe() == re.sub("finite ", "", text)


@pytest.mark.parametrize(
    "override, expected",
    [
        ("device.threads=100000", "device.threads=100000; expected 1 <= value <= 1024"),
        ("trainer.num_workers=1000", "trainer.num_workers=1000; expected 0 <= value <= 64"),
    ],
)
def test_absurd_counts_fail_at_compose_time(override: str, expected: str) -> None:
    assert _refused([override]) == expected


def test_the_largest_counts_allowed_compose() -> None:
    cfg = compose_config(["device.threads=1024", "trainer.num_workers=64"])
    assert (cfg.device.threads, cfg.trainer.num_workers) == (1024, 64)


@pytest.mark.parametrize(
    "override, expected",
    [
        ("dataset.max_depth=100000", "dataset.max_depth=100000; expected 1 <= value <= 200"),
        ("dataset.max_depth=0", "dataset.max_depth=0; expected 1 <= value <= 200"),
        ("dataset.leaf_prob=nan", "dataset.leaf_prob=nan; expected 0 <= value <= 1"),
    ],
)
def test_calculator_ranges_are_the_schemas(override: str, expected: str) -> None:
    """Once checked only by the generator, after composing, without the ``dataset.`` prefix."""
    assert _refused([override]) == expected


def test_the_schemas_depth_limit_is_the_generators() -> None:
    from foldexp.config import dataset
    from foldexp.data import calculator

    assert dataset.CALCULATOR_MAX_DEPTH == calculator._MAX_DEPTH_LIMIT


def test_missing_word_vectors_fail_at_compose_time_naming_the_key(tmp_path: Path) -> None:
    missing = tmp_path / "nonexistent.txt"
    message = _refused(["experiment=sst_treelstm", f"dataset.word_vectors={missing}"])
    assert message.startswith(
        f"dataset.word_vectors={missing}; expected an existing file, or null for none; "
    )
    # where the file comes from (it was only the key and the path)
    assert "GloVe text file" in message and "https://nlp.stanford.edu/projects/glove/" in message
    assert "FOLDEXP_DATA, or paths.data_dir=DIR" in message and len(message.splitlines()) == 1


def test_an_interpolated_word_vectors_path_is_resolved_first(tmp_path: Path) -> None:
    glove = ["experiment=sst_treelstm_glove", f"paths.data_dir={tmp_path}"]
    message = _refused(glove)
    assert message.startswith(f"dataset.word_vectors={tmp_path}/wordvec/glove.6B.50d")
    (tmp_path / "wordvec").mkdir()
    (tmp_path / "wordvec" / "glove.6B.50d.sst_vocab.txt.gz").write_bytes(b"")
    assert compose_config(glove).dataset.word_vectors.startswith(str(tmp_path))


def test_existing_or_no_word_vectors_compose(tmp_path: Path) -> None:
    vectors = tmp_path / "vec.txt"
    vectors.write_text("good 0.1 0.2\n")
    sst = ["experiment=sst_treelstm"]
    assert compose_config([*sst, f"dataset.word_vectors={vectors}"]).dataset.word_vectors
    assert compose_config([*sst, "dataset.word_vectors=null"]).dataset.word_vectors is None


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (["optimizer.lr=1e30"], "optimizer.lr=1e+30; expected 0 < value < 100"),
        (["optimizer.lr=1e3"], "optimizer.lr=1000.0; expected 0 < value < 100"),  # for 1e-3
        (["optimizer.lr=100"], "optimizer.lr=100.0; expected 0 < value < 100"),
        (["optimizer.weight_decay=1e30"], "optimizer.weight_decay=1e+30; expected 0 <= value < 10"),
        (["optimizer.weight_decay=1e4"], "optimizer.weight_decay=10000.0; expected 0 <= value "
         "< 10"),
        (["experiment=sst_treelstm", "model.embedding_lr=1e30"], "model.embedding_lr=1e+30; "
         "expected 0 < value < 100"),
        (["experiment=sst_treelstm", "model.embedding_weight_decay=10"],
         "model.embedding_weight_decay=10.0; expected 0 <= value < 10"),
    ],
)  # fmt: skip
def test_learning_rates_and_weight_decay_have_a_ceiling(
    overrides: list[str], expected: str
) -> None:
    """1e30 composed and diverged at the first step; 1e3 is a dropped minus."""
    assert _refused(overrides) == expected


@pytest.mark.parametrize(
    "overrides",
    [
        ["optimizer=sgd", "optimizer.lr=30", "optimizer.weight_decay=1"],  # AWD-LSTM's SGD
        ["optimizer=sgd", "optimizer.lr=99.9"],
        ["optimizer=adagrad", "optimizer.lr=0.05", "optimizer.weight_decay=1e-4"],  # TF Fold
        ["optimizer._target_=torch.optim.AdamW", "optimizer.weight_decay=9.99"],
        ["experiment=sst_treelstm", "model.embedding_lr=0.1", "model.embedding_weight_decay=0"],
    ],
)
def test_learning_rates_in_published_use_compose(overrides: list[str]) -> None:
    compose_config(overrides)
