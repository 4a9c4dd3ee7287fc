"""A run folder names no other files (issue 39, rows 11 and 12).

Before: ``foldexp eval`` read whatever file a run folder's config named
(``dataset.word_vectors=/etc/passwd``) and printed its first line in the error; an
interpolation in a run folder's config (``${oc.env:HOME}``) was resolved from the environment.
Now a file the run's config names is read only when the command line names it (or with
``--run-paths``), an interpolation is refused naming the file and the key, and an error about
a data file names the file and the line, never the line's text.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from foldexp.analysis.evaluate_run import run_eval
from foldexp.analysis.predict import run_predict
from foldexp.cli import main
from foldexp.config.errors import ConfigError
from foldexp.train.artifacts import write_json

SECRET = "root:x:0:0:SECRET-LINE:/root:/bin/bash"
ROWS = [("a good film", "pos"), ("great fun", "pos"), ("a dull film", "neg"), ("awful", "neg")]


def _texts(path: Path) -> Path:
    path.write_text("text,label\n" + "".join(f"{t},{y}\n" for t, y in ROWS * 4))
    return path


@pytest.fixture
def text_run(text_classifier: Path) -> Path:
    return text_classifier


def _crafted(run: Path, tmp_path: Path, **dataset: object) -> Path:
    """A copy of ``run`` whose run_info.json gives the dataset keys ``dataset`` (with a matching
    checksum: a crafter can write one too)."""
    copy = tmp_path / "crafted"
    shutil.copytree(run, copy)
    saved = json.loads((copy / "run_info.json").read_text())
    saved["config"]["dataset"].update(dataset)
    write_json(copy / "run_info.json", saved)
    return copy


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_eval_does_not_follow_a_file_the_run_folder_names(
    text_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = tmp_path / "passwd"
    secret.write_text(SECRET + "\n")
    crafted = _crafted(text_run, tmp_path, word_vectors=str(secret))
    mine = _texts(tmp_path / "mine.csv")
    out = str(tmp_path / "e.json")
    with pytest.raises(SystemExit) as stop:  # the data file is the user's; the vectors are not
        main(["eval", str(crafted), f"dataset.path={mine}", "--split", "all", "--out", out])
    err = _one_line(capsys)
    assert stop.value.code == 2 and "SECRET" not in err
    assert f"{crafted / 'run_info.json'}: dataset.word_vectors=" in err
    # the two commands to type instead, as typed here
    typed = f"foldexp eval {crafted} dataset.path={mine} --split all --out {out}"
    assert f"A run of your own, on the files it names: {typed} --run-paths; " in err
    assert f"on another file: {typed} dataset.word_vectors=PATH" in err
    # without dataset.path the run's own data file is not read either
    with pytest.raises(ConfigError, match=r"run_info\.json: dataset\.path='.*' names a file"):
        run_eval(crafted, [], split="all", out=out)


def test_an_error_about_a_file_never_quotes_it(
    text_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Told to read the run's files (--run-paths), the wrong file is refused naming its
    line; its text stays out of the message (and so out of logs)."""
    secret = tmp_path / "passwd"
    secret.write_text(SECRET + "\nbin:x:1:1\n")
    crafted = _crafted(text_run, tmp_path, word_vectors=str(secret))
    out = str(tmp_path / "e.json")
    with pytest.raises(SystemExit) as stop:
        main(["eval", str(crafted), "--run-paths", "--split", "all", "--out", out])
    err = _one_line(capsys)
    assert stop.value.code == 2 and f"{secret}:1: expected GloVe vectors" in err
    assert "SECRET" not in err


def test_predict_reads_no_file_the_run_folder_names(text_run: Path, tmp_path: Path) -> None:
    crafted = _crafted(text_run, tmp_path, word_vectors="/nonexistent/vectors.txt",
                       path="/nonexistent/data.csv")  # fmt: skip
    inputs = tmp_path / "in.txt"
    inputs.write_text("a good film\nawful\n")
    rows = run_predict(crafted, str(inputs), tmp_path / "out.csv")
    assert [r["error"] for r in rows] == ["", ""]


@pytest.mark.parametrize(
    ("section", "key"), [("dataset", "path"), ("trainer", "batch_size"), ("dataset", "fractions")]
)
def test_an_interpolation_in_a_run_folder_is_never_resolved(
    text_run: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    section: str,
    key: str,
) -> None:
    data = _texts(tmp_path / "elsewhere.csv")
    monkeypatch.setenv("FOLDEXP_TEST_VALUE", str(data) if key == "path" else "4")
    crafted = tmp_path / "crafted"
    shutil.copytree(text_run, crafted)
    saved = json.loads((crafted / "run_info.json").read_text())
    value = "${oc.env:FOLDEXP_TEST_VALUE}"
    saved["config"][section][key] = [0.5, value, 0.25] if key == "fractions" else value
    write_json(crafted / "run_info.json", saved)
    inputs = tmp_path / "in.txt"
    inputs.write_text("a good film\n")
    where = f"{section}.{key}" + ("[1]" if key == "fractions" else "")
    for command in (["eval", str(crafted), "--split", "all", "--out", str(tmp_path / "e.json")],
                    ["predict", str(crafted), str(inputs)]):  # fmt: skip
        with pytest.raises(SystemExit) as stop:
            main(command)
        err = _one_line(capsys)
        assert stop.value.code == 2, err
        assert f"{crafted / 'run_info.json'}: {where}='${{oc.env:FOLDEXP_TEST_VALUE}}' is an " \
            "interpolation" in err  # fmt: skip
        assert "never resolved" in err
