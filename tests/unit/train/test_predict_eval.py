"""``foldexp predict`` and ``foldexp eval`` on a trained molecule run, from its folder alone.

Predict reads a CSV (plain or gzip), a file of one SMILES a line or stdin; an invalid input
gets a row with its error, never a failure of the file. Eval scores another file through the
run's saved statistics and refuses one that describes another task.
"""

from __future__ import annotations

import gzip
import io
import json
import sys
from pathlib import Path

import pytest

from foldexp.analysis.evaluate_run import run_eval
from foldexp.analysis.predict import run_predict
from foldexp.analysis.predict_inputs import read_inputs
from foldexp.cli import main as cli_main
from foldexp.config.errors import ConfigError
from foldexp.train.app import compose_config
from foldexp.train.loop import run_train

SMILES = [
    "CCO", "CCCC", "c1ccccc1", "CC(=O)O", "CCN", "OCCO", "c1ccncc1", "CC(C)O", "ClCCl",
    "CCOCC", "C1CCCCC1", "c1ccc2ccccc2c1", "CC#N", "CCCl", "O=C1CCCCC1", "Cc1ccccc1",
    "CS(C)=O", "NCCO", "FC(F)F", "C=CC", "Oc1ccccc1", "CCCCO", "C1CCOC1", "c1ccoc1",
]  # fmt: skip
SIZES = ["model.atom_size=8", "model.pair_size=6", "model.graph_size=8", "model.mlp_size=8"]


def _lines(folder: Path, inputs: list[str]) -> Path:
    path = folder / "lines.txt"
    path.write_text("".join(f"{x}\n" for x in inputs))
    return path


def _csv(path: Path, smiles: list[str], column: str = "smiles") -> Path:
    path.write_text(f"{column},size\n" + "".join(f"{s},{len(s) / 10:.1f}\n" for s in smiles))
    return path


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("mol")
    data = _csv(root / "train.csv", SMILES)
    out = root / "run"
    cfg = compose_config(
        [
            "experiment=molecules_csv",
            f"dataset.path={data}",
            "dataset.targets=[size]",
            "dataset.cache_dir=null",
            "trainer.epochs=2",
            "trainer.batch_size=8",
            "trainer.progress=false",
            "trainer.plots=false",
            *SIZES,
        ],
        out,
    )
    run_train(cfg)
    return out


def test_an_invalid_input_gets_its_row_and_the_rest_are_predicted(
    run: Path, tmp_path: Path
) -> None:
    inputs = _csv(tmp_path / "new.csv", ["CCO", "C1CC", "", "c1ccccc1"])
    rows = run_predict(run, str(inputs), tmp_path / "out.csv")
    assert [r["smiles"] for r in rows] == ["CCO", "C1CC", "", "c1ccccc1"]
    assert rows[0]["error"] == "" and float(rows[0]["size"]) == pytest.approx(
        float(rows[0]["size"])
    )
    assert "C1CC" in rows[1]["error"] and rows[1]["size"] == ""
    assert rows[2]["error"] and rows[3]["error"] == ""
    header = (tmp_path / "out.csv").read_text().splitlines()[0]
    assert header == "smiles,input_size,size,error"  # the file's own size comes through too
    assert [r["input_size"] for r in rows] == ["0.3", "0.4", "0.0", "0.8"]


def test_gzip_lines_and_stdin_give_the_same_predictions(
    run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    plain = run_predict(run, str(_csv(tmp_path / "a.csv", SMILES[:5])))
    capsys.readouterr()
    packed = tmp_path / "a.csv.data"  # gzip found by its bytes, not its name
    packed.write_bytes(gzip.compress((tmp_path / "a.csv").read_bytes()))
    lines = tmp_path / "a.txt"
    lines.write_text("\n".join(SMILES[:5]) + "\n")
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(SMILES[:5]) + "\n"))
    for source in (str(packed), str(lines), "-"):
        again = run_predict(run, source)
        assert [r["size"] for r in again] == [r["size"] for r in plain]
    printed = capsys.readouterr().out.splitlines()
    assert printed.count("smiles,input_size,size,error") == 1  # to stdout: the CSV's columns
    assert printed.count("smiles,size,error") == 2 and len(printed) == 3 * 6  # lines and stdin


def test_semicolon_and_tab_files_and_another_case_of_the_column(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    plain = run_predict(run, str(_csv(tmp_path / "a.csv", SMILES[:4])))
    body = "".join(f"x{i};{s};1" for i, s in enumerate(SMILES[:4]))
    semicolon = tmp_path / "semi.csv"
    semicolon.write_text("Name;SMILES;size, measured\n" + body.replace("1x", "1\nx") + "\n")
    tab = tmp_path / "tab.tsv"
    tab.write_text("id\tsmiles\n" + "".join(f"{i}\t{s}\n" for i, s in enumerate(SMILES[:4])))
    for source in (semicolon, tab):
        rows = run_predict(run, str(source))
        assert [r["size"] for r in rows] == [r["size"] for r in plain], source.name
    capsys.readouterr()


def test_the_inputs_other_columns_come_through(run: Path, tmp_path: Path) -> None:
    """An ID or name column was dropped: predictions could not be joined back."""
    source = tmp_path / "ids.csv"
    source.write_text('id,name,smiles\nM1,"ethanol, dry",CCO\nM2,,C1CC\nM3,benzene,c1ccccc1\n')
    rows = run_predict(run, str(source), tmp_path / "out.csv")
    header = (tmp_path / "out.csv").read_text().splitlines()[0]
    assert header == "smiles,id,name,size,error"
    assert [(r["id"], r["name"]) for r in rows] == [
        ("M1", "ethanol, dry"), ("M2", ""), ("M3", "benzene")
    ]  # fmt: skip
    assert rows[1]["error"] and rows[1]["size"] == "" and rows[2]["size"] != ""


def test_a_csv_without_the_column_or_with_a_ragged_row_is_refused(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    other = tmp_path / "other.csv"
    other.write_text("molecule,y\nCCO,1\nCCN,2\n")
    with pytest.raises(ValueError, match=r"no column 'smiles' in the header \('molecule', 'y'\)"):
        run_predict(run, str(other))
    with pytest.raises(SystemExit) as stop:
        cli_main(["predict", str(run), str(other)])
    assert stop.value.code == 2 and "--column" in capsys.readouterr().err
    ragged = tmp_path / "ragged.csv"
    ragged.write_text("smiles,y\nCCO,1\nCCN,2,3\n")
    with pytest.raises(ValueError, match=r"ragged.csv:3: 3 fields, but the header has 2"):
        run_predict(run, str(ragged))


def test_a_ragged_record_is_named_by_the_line_it_starts_on(tmp_path: Path) -> None:
    path = tmp_path / "spans.csv"
    path.write_text('smiles,name\nCCO,"two\nlines"\n\nCCN,"also\ntwo",3\n')
    with pytest.raises(ValueError, match=r"spans\.csv:5: 3 fields, but the header has 2"):
        read_inputs(str(path), "smiles")
    path.write_text('smiles,name\nCCO,"two\nlines"\n\nCCN,x\n')
    assert read_inputs(str(path), "smiles") == ("smiles", ["CCO", "CCN"])


def test_one_input_a_line_keeps_blank_lines_as_rows(run: Path, tmp_path: Path) -> None:
    lines = tmp_path / "in.txt"
    lines.write_text("CCO\n\nc1ccccc1\n\n\n")
    rows = run_predict(run, str(lines), tmp_path / "out.csv")
    assert [r["smiles"] for r in rows] == ["CCO", "", "c1ccccc1"]  # trailing blanks dropped
    assert rows[1]["error"] == "empty SMILES" and rows[2]["error"] == ""
    spaced = run_predict(run, str(_lines(tmp_path, ["CCO ethanol"])))
    assert spaced[0]["error"] == "invalid SMILES 'CCO ethanol' (a SMILES holds no spaces)"


def test_the_cli_writes_a_csv_and_says_how_many_rows_failed(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    inputs = _csv(tmp_path / "new.csv", ["CCO", "not a molecule"])
    assert cli_main(["predict", str(run), str(inputs), "--output", str(tmp_path / "p.csv")]) == 0
    assert "2 rows, 1 with an error" in capsys.readouterr().err


def test_eval_scores_another_file_with_the_runs_statistics(run: Path, tmp_path: Path) -> None:
    other = _csv(tmp_path / "other.csv", list(reversed(SMILES)))
    scored = run_eval(run, [f"dataset.path={other}", "dataset.split=random"], split="dev")
    saved = json.loads((run / "eval.json").read_text())
    assert saved["dev_rmse"] == scored["dev_rmse"] > 0 and saved["split"] == "dev"


def test_eval_scores_a_whole_other_file_or_says_how_much_it_scored(
    run: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    other = _csv(tmp_path / "other.csv", list(reversed(SMILES)))
    whole = run_eval(run, [f"dataset.path={other}"], split="all")
    assert whole["examples"] == whole["dataset_examples"] == len(SMILES) and whole["all_rmse"] > 0
    with caplog.at_level("WARNING"):
        part = run_eval(run, [f"dataset.path={other}"], split="test")
    assert part["examples"] < part["dataset_examples"] == len(SMILES)
    assert f"of the dataset's {len(SMILES)} examples (--split all" in caplog.text


def test_a_relative_data_path_is_saved_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    _csv(Path("train.csv"), SMILES)
    overrides = ["experiment=molecules_csv", "dataset.path=train.csv", "dataset.targets=[size]",
                 "dataset.cache_dir=null", "trainer.epochs=1", "trainer.batch_size=8",
                 "trainer.progress=false", "trainer.plots=false", *SIZES]  # fmt: skip
    out = tmp_path / "run"
    run_train(compose_config(overrides, out))
    saved = json.loads((out / "run_info.json").read_text())["config"]["dataset"]
    assert saved["path"] == str(tmp_path / "here" / "train.csv")
    monkeypatch.chdir(tmp_path)  # eval from another folder reads the same file ...
    with pytest.raises(ConfigError, match=r"dataset\.path='.*here/train\.csv' names a file"):
        run_eval(out, [], split="test")  # ... only when told to: a run folder names no files
    assert run_eval(out, [], split="test", run_paths=True)["test_rmse"] > 0


def test_a_target_named_error_keeps_its_column(tmp_path: Path) -> None:
    data = _csv(tmp_path / "e.csv", SMILES).read_text().replace("smiles,size", "smiles,error")
    (tmp_path / "e.csv").write_text(data)
    overrides = ["experiment=molecules_csv", f"dataset.path={tmp_path / 'e.csv'}",
                 "dataset.targets=[error]", "dataset.cache_dir=null", "trainer.epochs=1",
                 "trainer.progress=false", "trainer.plots=false", *SIZES]  # fmt: skip
    run_train(compose_config(overrides, tmp_path / "run"))
    rows = run_predict(tmp_path / "run", str(_lines(tmp_path, ["CCO", "C1CC"])), tmp_path / "p")
    assert list(rows[0]) == ["smiles", "error", "predict_error"]
    assert rows[0]["error"] and not rows[0]["predict_error"] and rows[1]["predict_error"]


def test_eval_refuses_a_file_of_another_task_and_unknown_keys(run: Path, tmp_path: Path) -> None:
    other = tmp_path / "two.csv"
    other.write_text("smiles,size,mass\n" + "".join(f"{s},1.0,2.0\n" for s in SMILES))
    with pytest.raises(ConfigError, match=r"num_targets=2 but .*with num_targets=1"):
        run_eval(run, [f"dataset.path={other}", "dataset.targets=[size,mass]"])
    with pytest.raises(ConfigError, match=r"dataset\.pth is not a key"):
        run_eval(run, ["+dataset.pth=x"])
    with pytest.raises(ConfigError, match=r"expected KEY=VALUE with a dataset"):
        run_eval(run, ["model.atom_size=3"])
    # a trainer value outside its enum: one line naming the key (OmegaConf's error spanned
    # three lines and named ``strategy`` alone)
    with pytest.raises(ConfigError, match=r"^trainer\.strategy=bogus: .*single, ddp\]$"):
        run_eval(run, ["trainer.strategy=bogus"], run_paths=True)
