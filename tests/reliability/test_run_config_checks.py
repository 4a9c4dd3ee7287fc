"""A run folder's saved config is checked before a model is built from it.

``foldexp predict`` and ``foldexp eval`` rebuild a model from ``run_info.json``, which anyone
may have edited (with its checksum rewritten to match). A target that is not a string, a key
the schema lacks, a target of the wrong role, or sizes that do not fit the checkpoint (an absurd
one would allocate petabytes) fail with one line naming the file and the key, exit status 2.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from foldexp.analysis.evaluate_run import run_eval
from foldexp.analysis.predict import run_predict
from foldexp.cli import main
from foldexp.config.errors import ConfigError
from foldexp.config.targets import check_registered
from foldexp.train.artifacts import write_json
from foldexp.train.runs import load_trained


def _edited(finished: Path, tmp_path: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    """A copy of ``finished`` whose ``run_info.json`` config ``edit`` changed (checksum fixed)."""
    copy = tmp_path / "edited"
    shutil.copytree(finished, copy)
    data = json.loads((copy / "run_info.json").read_text())
    edit(data["config"])
    write_json(copy / "run_info.json", data)
    return copy


def test_a_target_that_is_not_a_string_is_refused() -> None:
    config = {"model": {"_target_": ["evilmod.Boom"]}}
    with pytest.raises(ConfigError, match=r"f\.json: model\._target_=\['evilmod\.Boom'\] is not a"):
        check_registered(config, "f.json")


@pytest.mark.parametrize(
    "section, key, value, expected",
    [
        ("model", "_target_", ["evilmod.Boom"], r"model\._target_=\['evilmod.Boom'\] is not a"),
        ("model", "_target_", {"a": 1}, r"model\._target_=\{'a': 1\} is not a"),
        ("model", "evil", 1, r"model\.evil is not a key of model"),
        ("model", "hidden_size", -3, r"model\.hidden_size=-3; expected"),
        ("model", "_target_", "torch.optim.SGD", r"model\._target_='torch\.optim\.SGD' is not a "
         "foldexp model"),
        ("dataset", "_target_", "torch.optim.SGD", r"dataset\._target_='torch\.optim\.SGD' is not"),
        ("optimizer", "_target_", "foldexp.models.weave.WeaveModel", r"optimizer\._target_="),
        ("trainer", "batch_size", 0, r"trainer\.batch_size=0"),
    ],
)  # fmt: skip
def test_a_bad_saved_config_is_refused_naming_the_file_and_key(
    finished: Path, tmp_path: Path, section: str, key: str, value: Any, expected: str
) -> None:
    run = _edited(finished, tmp_path, lambda config: config[section].update({key: value}))
    inputs = tmp_path / "in.txt"
    inputs.write_text("(1 (2 3) (4 5))\n")
    for call in (lambda: run_predict(run, str(inputs)), lambda: run_eval(run)):
        with pytest.raises(ConfigError, match=r"run_info\.json: " + expected):
            call()


# 65536, the schema's widest, would allocate 160 GiB; 10**7 is refused by its range already
@pytest.mark.parametrize("size", [16, 65536])
def test_sizes_that_do_not_fit_the_checkpoint_are_refused_before_building(
    finished: Path, tmp_path: Path, size: int
) -> None:
    run = _edited(finished, tmp_path, lambda config: config["model"].update(hidden_size=size))
    with pytest.raises(ConfigError) as err:
        load_trained(run)
    message = str(err.value)
    assert str(run / "checkpoints" / "best.pt") in message and "run_info.json" in message
    assert "does not fit" in message and "parameter compiler." in message and "shape [" in message


def test_the_command_line_reports_a_bad_config_in_one_line(
    finished: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _edited(finished, tmp_path, lambda config: config["model"].update(hidden_size=4))
    with pytest.raises(SystemExit) as exit_:
        main(["eval", str(run)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "does not fit" in err and "Traceback" not in err


def test_a_run_loads_without_the_word_vectors_it_trained_with(tmp_path: Path) -> None:
    """Its vocabulary and embeddings are saved: predict needs no vectors file, and a folder
    from another machine names one that is not here."""
    from omegaconf import OmegaConf

    from foldexp.config.checks import check_config, check_run_config
    from foldexp.train.app import compose_config

    vectors = tmp_path / "vectors.txt"
    vectors.write_text("good 0.1 0.2\n")
    cfg = compose_config(["experiment=trees_ptb", f"dataset.path={tmp_path}",
                          f"dataset.word_vectors={vectors}"], tmp_path / "run")  # fmt: skip
    config = OmegaConf.to_container(cfg, resolve=True)
    config["dataset"]["word_vectors"] = str(tmp_path / "elsewhere.txt")
    check_run_config(config, "run_info.json")
    with pytest.raises(ConfigError, match=r"dataset\.word_vectors=.*elsewhere\.txt; expected an"):
        check_config(config)
