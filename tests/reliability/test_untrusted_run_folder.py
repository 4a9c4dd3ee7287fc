"""Run folders are untrusted: a crafted config never makes foldexp import or call code.

``foldexp ensemble``, ``model.teacher``, ``foldexp predict`` and ``foldexp eval`` build models
and datasets from a run folder's config only through foldexp's registry of targets
(``foldexp.validate.TARGETS``); anything else is refused naming the file and the key.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from foldexp.analysis.ensemble import run_ensemble
from foldexp.analysis.evaluate_run import run_eval
from foldexp.analysis.predict import run_predict
from foldexp.train.app import compose_config
from foldexp.train.artifacts import write_json
from foldexp.train.loop import run_train
from foldexp.validate import ConfigError

# Each would run code if a run folder's config were instantiated as it stands.
PAYLOADS = {
    "shutil.copyfile": {"src": "/etc/hostname", "dst": "STOLEN"},
    "torch.load": {"f": "STOLEN.pt", "weights_only": False},
    "pandas.read_pickle": {"filepath_or_buffer": "STOLEN.pkl"},
    "numpy.load": {"file": "STOLEN.npy", "allow_pickle": True},
}


def _crafted(run: Path, tmp_path: Path, file: str, section: str, target: str) -> Path:
    """A copy of ``run`` whose ``file`` names ``target`` as ``<section>._target_``."""
    import shutil

    copy = tmp_path / "crafted"
    shutil.copytree(run, copy)
    data = json.loads((copy / file).read_text())
    data["config"][section] = {"_target_": target, **PAYLOADS[target]}
    write_json(copy / file, data)  # with a matching checksum: a crafter can write one too
    return copy


@pytest.mark.parametrize("target", sorted(PAYLOADS))
@pytest.mark.parametrize("section", ["dataset", "model"])
def test_ensemble_refuses_a_foreign_target(
    finished: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str, section: str
) -> None:
    monkeypatch.chdir(tmp_path)
    crafted = _crafted(finished, tmp_path, "results.json", section, target)
    with pytest.raises(ConfigError) as err:
        run_ensemble([crafted])
    message = str(err.value)
    assert str(crafted / "results.json") in message and f"{section}._target_" in message
    assert not list(tmp_path.glob("STOLEN*"))


@pytest.mark.parametrize("target", sorted(PAYLOADS))
def test_predict_and_eval_refuse_a_foreign_target(
    finished: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str
) -> None:
    monkeypatch.chdir(tmp_path)
    crafted = _crafted(finished, tmp_path, "run_info.json", "dataset", target)
    inputs = tmp_path / "in.txt"
    inputs.write_text("(1 (2 3) (4 5))\n")
    for call in (lambda: run_predict(crafted, str(inputs)), lambda: run_eval(crafted)):
        with pytest.raises(ConfigError, match=r"run_info\.json: dataset\._target_="):
            call()
    assert not list(tmp_path.glob("STOLEN*"))


def test_teacher_refuses_a_foreign_target(
    tiny: list[str], finished: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    crafted = _crafted(finished, tmp_path, "results.json", "model", "shutil.copyfile")
    cfg = compose_config([*tiny, f"model.teacher=[{crafted}]"], tmp_path / "student")
    with pytest.raises(ConfigError, match=r"results\.json: model\._target_='shutil\.copyfile'"):
        run_train(cfg)
    assert not list(tmp_path.glob("STOLEN*"))


def test_a_nested_target_is_refused_too(finished: Path, tmp_path: Path) -> None:
    crafted = tmp_path / "nested"
    import shutil

    shutil.copytree(finished, crafted)
    data = json.loads((crafted / "results.json").read_text())
    data["config"]["model"]["vocab"] = {"_target_": "os.system", "command": "true"}
    write_json(crafted / "results.json", data)
    with pytest.raises(ConfigError, match=r"model\.vocab\._target_='os\.system'"):
        run_ensemble([crafted])
