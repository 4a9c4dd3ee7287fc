"""An interpolated value is checked against its key's range as it resolves (issue 52, row 3).

Before: ``model.hidden_size='${seed}' seed=4294967295`` and ``trainer.batch_size='${seed}'
seed=0`` passed every check (an interpolation was "checked where it points", against the
seed's range) and ended in tracebacks once the data and model were built.
"""

from __future__ import annotations

import pytest

from foldexp.cli import main
from foldexp.config.errors import ConfigError
from foldexp.train.app import compose_config

CASES = [
    (["model.hidden_size=${seed}", "seed=4294967295"], "model.hidden_size=4294967295"),
    (["trainer.batch_size=${seed}", "seed=0"], "trainer.batch_size=0"),
    (["trainer.epochs=${trainer.batch_size}", "trainer.batch_size=10000000"], "trainer.epochs="),
]


def test_an_interpolation_of_another_type_is_one_line() -> None:
    """Second pass: ``trainer.batch_size='${task_name}'`` was OmegaConf's four lines."""
    with pytest.raises(ConfigError) as err:
        compose_config(["trainer.batch_size=${task_name}"])
    assert len(str(err.value).splitlines()) == 1 and "trainer.batch_size=" in str(err.value)


@pytest.mark.parametrize(("overrides", "named"), CASES)
def test_interpolated_value_out_of_range_is_refused_when_composed(
    overrides: list[str], named: str
) -> None:
    with pytest.raises(ConfigError, match="expected") as err:
        compose_config(overrides)
    assert named in str(err.value) and "${" in str(err.value)


def test_in_range_interpolation_passes() -> None:
    cfg = compose_config(["trainer.batch_size=${seed}", "seed=3"])
    assert cfg.trainer.batch_size == 3


def test_command_line_says_it_in_one_line(
    tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["train", "model.hidden_size=${seed}", "seed=4294967295",
              f"hydra.run.dir={tmp_path}/run"])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and len(err.splitlines()) == 1, err
    assert "model.hidden_size=4294967295" in err
