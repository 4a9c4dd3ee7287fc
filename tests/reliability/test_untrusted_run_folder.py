"""Run folders are untrusted: a crafted config never makes foldexp import or call code.

``foldexp ensemble``, ``model.teacher``, ``foldexp predict`` and ``foldexp eval`` build models
and datasets from a run folder's config only through foldexp's registry of targets
(``foldexp.config.targets.TARGETS``); anything else is refused naming the file and the key.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from foldexp.analysis.ensemble import run_ensemble
from foldexp.analysis.evaluate_run import run_eval
from foldexp.analysis.predict import run_predict
from foldexp.config.errors import ConfigError
from foldexp.train.app import compose_config
from foldexp.train.artifacts import write_json
from foldexp.train.loop import run_train

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


# A run folder's config edited (checksum rewritten to match): a foreign target, or a value
# outside its range that foldexp train would refuse at compose time.
TAMPERED = [
    ("model", {"_target_": "os.system", "command": "touch STOLEN"}),
    ("dataset", {"_target_": "os.system"}),
    ("dataset", {"n": -5}),
    ("model", {"hidden_size": 10_000_000}),
    ("trainer", {"batch_size": 0}),
    ("optimizer", {"lr": -1.0}),
    ("optimizer", {"lr": 1e30}),
]


def _tamper(folder: Path, file: str, section: str, change: dict) -> None:
    data = json.loads((folder / file).read_text())
    data["config"][section].update(change)
    write_json(folder / file, data)


@pytest.mark.parametrize(("section", "change"), TAMPERED)
def test_ensemble_checks_a_run_folder_as_predict_and_eval_do(
    finished: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    section: str,
    change: dict,
) -> None:
    """One tampered run among good ones: refused in one line, exit 2, before any dataset or
    model of any run is built; the message is the one eval gives for the same edit."""
    import shutil

    from foldexp.cli import main

    monkeypatch.chdir(tmp_path)
    sweep = tmp_path / "sweep"
    shutil.copytree(finished, sweep / "good")
    bad = sweep / "bad"
    shutil.copytree(finished, bad)
    _tamper(bad, "results.json", section, change)
    _tamper(bad, "run_info.json", section, change)
    built: list[str] = []

    def refuse(what: str):
        def call(*args: object, **kwargs: object) -> None:
            built.append(what)
            raise AssertionError(f"{what} was built from a tampered run folder")

        return call

    monkeypatch.setattr("foldexp.train.runs.build_dataset", refuse("a dataset"))
    monkeypatch.setattr("foldexp.train.runs.build_fitting_model", refuse("a model"))
    with pytest.raises(SystemExit) as exit_:
        main(["ensemble", str(sweep)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    prefix = f"foldexp ensemble: error: {bad / 'results.json'}: "
    assert err.startswith(prefix) and f"{section}." in err
    assert not built and not (sweep / "ensemble.json").exists()
    assert not list(tmp_path.glob("STOLEN*"))
    with pytest.raises(ConfigError) as by_eval:  # the same check, word for word
        run_eval(bad)
    assert str(by_eval.value) == f"{bad / 'run_info.json'}: {err.removeprefix(prefix)}"
