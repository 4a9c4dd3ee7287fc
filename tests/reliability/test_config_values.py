"""Every config value is checked: ranges at compose time, data-dependent checks before step 1.

Each case below was accepted by foldexp before these checks and then trained wrongly (gradient
ascent for a negative clip), dropped data silently (a negative limit) or crashed late with an
unrelated error (``KeyError: 'root_correct'``, ``ZeroDivisionError``, a oneDNN descriptor error).
"""

from __future__ import annotations

import dataclasses
import gzip
import re
from pathlib import Path

import pytest

from foldexp import config as schemas
from foldexp.config.errors import ConfigError
from foldexp.config.targets import TARGETS
from foldexp.train.app import compose_config
from foldexp.train.loop import run_train

OUT_OF_RANGE = [
    ("trainer.grad_clip=-1", "a finite value >= 0"),
    ("trainer.batch_size=0", "1 <= value <= 10000000"),
    ("trainer.batch_size=-5", "1 <= value <= 10000000"),
    ("trainer.eval_batch_size=0", "1 <= value <= 10000000"),
    ("trainer.epochs=0", "1 <= value <= 1000000"),
    ("trainer.epochs=-1", "1 <= value <= 1000000"),
    ("dataset.n=0", "3 <= value <= 10000000"),
    ("trainer.limit_batches=-1", "0 <= value <= 1000000000"),
    ("model.hidden_size=0", "0 < value <= 65536"),
    ("optimizer.lr=-1", "0 < value < 100"),
    ("optimizer.weight_decay=-1", "0 <= value < 10"),
    ("trainer.num_workers=-1", "0 <= value <= 64"),
    ("trainer.patience=-1", "0 <= value <= 1000000"),
    ("trainer.ema_decay=1.0", "0 <= value < 1"),
    ("model.dropout=1.5", "0 <= value < 1"),
    ("seed=-2", "0 <= value <= 4294967295"),
]


@pytest.mark.parametrize(("override", "allowed"), OUT_OF_RANGE)
def test_out_of_range_values_fail_at_compose_time(
    tmp_path: Path, override: str, allowed: str
) -> None:
    key = override.split("=")[0]
    with pytest.raises(ConfigError) as err:
        compose_config([override], tmp_path)
    assert str(err.value).startswith(f"{key}=")
    assert allowed in str(err.value)


def test_a_negative_limit_is_refused_not_applied(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"dataset\.limit=-3; expected 0 <= value <= 1000000000"):
        compose_config(["experiment=sst_treelstm", "dataset.limit=-3"], tmp_path)


@pytest.mark.parametrize("override", ["+dataset.path=x.csv", "+model.hiden_size=3"])
def test_unknown_keys_fail_naming_the_keys_that_exist(tmp_path: Path, override: str) -> None:
    with pytest.raises(ConfigError, match=r"is not a key of .*(; its|\? Its) keys are .*"):
        compose_config([override], tmp_path)


def test_every_numeric_schema_key_has_a_range() -> None:
    """A new numeric key without a range would let a nonsense value through again."""
    classes = [c for c in TARGETS.values() if c is not None]
    classes += [schemas.TrainerConfig, schemas.OptimizerConfig, schemas.DeviceConfig]
    classes += [schemas.SGDConfig, schemas.AdamConfig, schemas.AdagradConfig]
    missing = [
        f"{cls.__name__}.{f.name}"
        for cls in classes
        for f in dataclasses.fields(cls)
        # a word of its own: an enum named ``Uncertainty`` is not an int
        if re.search(r"\b(int|float)\b", str(f.type)) and "range" not in f.metadata
    ]
    assert not missing


TINY = ["dataset.n=60", "trainer.epochs=1", "trainer.progress=false", "trainer.plots=false"]


def test_an_unknown_select_metric_fails_before_the_first_step(tmp_path: Path) -> None:
    cfg = compose_config([*TINY, "trainer.select_metric=dev_acc"], tmp_path)
    with pytest.raises(ConfigError, match=r"dev_acc.*dev_accuracy"):
        run_train(cfg)
    assert not (tmp_path / "checkpoints").exists() and not (tmp_path / "metrics.csv").exists()


def test_vectors_of_another_width_fail_before_the_first_step(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "sst").mkdir(parents=True)
    for split in ("train", "dev", "test"):
        (data / "sst" / f"{split}.txt").write_text("(3 (2 It) (4 good))\n(1 (2 Not) (1 bad))\n")
    vectors = tmp_path / "vec.txt.gz"
    with gzip.open(vectors, "wt") as f:
        f.write("It 0.1 0.2 0.3\ngood 0.3 0.2 0.1\nbad 0.0 0.1 0.0\n")
    cfg = compose_config(
        [
            "experiment=sst_treelstm",
            f"paths.data_dir={data}",
            f"dataset.word_vectors={vectors}",
            "model.embed_size=5",
            "trainer.progress=false",
        ],
        tmp_path / "run",
    )
    with pytest.raises(ConfigError, match=r"3-d vectors but model\.embed_size=5"):
        run_train(cfg)
    assert not (tmp_path / "run" / "checkpoints").exists()


@pytest.mark.parametrize(
    "override, says",
    [
        ("trainer.epochs=1.5", "trainer.epochs=1.5; expected an integer, 1 <= value <= 1000000"),
        ("optimizer.fused=maybe", "optimizer.fused=maybe: Value 'maybe' is not a valid bool"),
        ("trainer.nosuch=1", "trainer.nosuch is not a key of trainer (TrainerConfig); its keys"),
    ],
)
def test_wrongly_typed_overrides_fail_on_one_line_with_status_2(
    capsys: pytest.CaptureFixture[str], override: str, says: str
) -> None:
    """Hydra's own composition errors (a type, an unknown key) read as foldexp's do."""
    from foldexp.cli import main

    assert main(["train", override]) == 2
    err = capsys.readouterr().err
    first = err.splitlines()[0]
    assert first.startswith("foldexp train: error: ") and says in first
    assert "HYDRA_FULL_ERROR" not in err and "reference_type" not in err
    assert "HYDRA_FULL_ERROR" not in __import__("os").environ


def test_a_runs_own_config_error_is_not_taken_for_a_users(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Past composition, an OmegaConf error is a bug of the run: Hydra reports it as always
    (traceback, status 1), and the run's child processes never inherit HYDRA_FULL_ERROR."""
    import os

    from omegaconf.errors import ConfigAttributeError

    from foldexp.cli import main

    seen: list[str | None] = []

    def buggy_run(cfg: object) -> dict:
        seen.append(os.environ.get("HYDRA_FULL_ERROR"))
        raise ConfigAttributeError("Key 'no_such_key' is not in struct")

    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    monkeypatch.setattr("foldexp.train.loop.run_train", buggy_run)
    with pytest.raises(SystemExit) as exit_:
        main(["train", f"hydra.run.dir={tmp_path}"])
    assert exit_.value.code == 1 and seen == [None]
    assert "foldexp train: error" not in capsys.readouterr().err


@pytest.mark.parametrize(
    "override, says",
    [
        ("device.keep_memory=2", "device.keep_memory=2; expected true or false"),
        ("trainer.progress=0", "trainer.progress=0; expected true or false"),
        ("device.fused_cells=on", "device.fused_cells=on; expected true, false or null"),
        ("device.flush_denormal=yes", "device.flush_denormal=yes; expected true or false"),
    ],
)
def test_a_boolean_key_takes_only_true_or_false(override: str, says: str) -> None:
    """OmegaConf reads any integer (and yes/on) into a boolean key: ``device.keep_memory=2``
    composed as true. The command line's overrides are held to the schema's true/false."""
    with pytest.raises(ConfigError, match=re.escape(says)):
        compose_config([override])


@pytest.mark.parametrize(
    "overrides",
    [["device.fused_cells=null"], ["device.flush_denormal=False", "device.onednn=true"]],
)
def test_true_false_and_null_where_allowed_compose(overrides: list[str]) -> None:
    compose_config(overrides)


@pytest.mark.parametrize("command", ["train", "bench"])
def test_a_commands_boolean_override_fails_with_status_2(
    capsys: pytest.CaptureFixture[str], command: str
) -> None:
    from foldexp.cli import main

    assert main([command, "device.keep_memory=2"]) == 2
    err = capsys.readouterr().err
    assert f"foldexp {command}: error: " in err
    assert "device.keep_memory=2; expected true or false" in err
    assert "HYDRA_FULL_ERROR" not in __import__("os").environ


@pytest.mark.parametrize("value", ["fast", "true", "1"])
def test_device_compile_takes_only_its_modes(
    capsys: pytest.CaptureFixture[str], value: str
) -> None:
    from foldexp.cli import main

    assert main(["train", f"device.compile={value}"]) == 2
    err = capsys.readouterr().err
    assert "device.compile" in err and "off, graphs, inductor" in err, err


@pytest.mark.parametrize("value", ["off", "graphs", "inductor", "null"])
def test_device_compile_modes_compose(value: str) -> None:
    compose_config([f"device.compile={value}"])
