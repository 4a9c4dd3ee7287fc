"""Hostile inputs cost one row (issue 39, rows 14 and 15).

Before: ``foldexp predict`` read its whole input (1 GB of trees on stdin: 3.4 GB, then
``MemoryError`` and no output); one SMILES of 10⁴ atoms among good ones failed the whole file
(``Unable to allocate 5.22 GiB``: its pair features), and one of 131,073 characters refused the
whole file (Python's CSV field limit). Now predict streams its input in bounded chunks (a line
longer than ``MAX_LINE_BYTES`` is its row's error), and a molecule past ``dataset.max_atoms`` or
``dataset.max_smiles_chars`` is that row's error in predict and an invalid row
(``dataset.on_invalid``) in training.
"""

from __future__ import annotations

import csv
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from foldexp.analysis.predict import CHUNK_INPUTS, run_predict
from foldexp.analysis.predict_inputs import MAX_LINE_BYTES
from foldexp.config.errors import ConfigError
from foldexp.data.errors import MoleculeError
from foldexp.data.molecules import load_molecule_csv
from foldexp.train.app import compose_config
from foldexp.train.loop import run_train

ROOT = Path(__file__).resolve().parents[2]
HUGE = "a" * (MAX_LINE_BYTES + 4096)  # one line past the limit


def _predict_process(run: Path, *args: str) -> subprocess.Popen[bytes]:
    # This tree first, and whatever else the path held (packages installed with --target)
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "FOLDEXP_TRACEBACK": "1"}
    command = [sys.executable, "-m", "foldexp", "predict", str(run), "-", *args]
    return subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=ROOT,  # ``-m`` puts the working folder first on the path: this tree's foldexp
    )


def _feed(proc: subprocess.Popen[bytes], lines: int, huge: int) -> None:
    """Writes ``lines`` short inputs to the process, a line past the limit among every
    ``lines // huge`` of them, then closes its input."""
    assert proc.stdin is not None
    try:
        for k in range(lines):
            proc.stdin.write(b"a good film\n" if k % (lines // huge) else HUGE.encode() + b"\n")
        proc.stdin.close()
    except BrokenPipeError:
        pass  # the process died: its status tells


def _peak(proc: subprocess.Popen[bytes], lines: int, huge: int) -> tuple[int, int, list[str]]:
    """``(peak RSS in KiB, status, output lines)`` of ``proc`` fed ``_feed(lines, huge)``."""
    out: list[bytes] = []
    feeder = threading.Thread(target=_feed, args=(proc, lines, huge))
    reader = threading.Thread(target=lambda: out.append(proc.stdout.read()))  # type: ignore[union-attr]
    feeder.start()
    reader.start()
    _, status, usage = os.wait4(proc.pid, 0)
    feeder.join()
    reader.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.stdin.close()  # type: ignore[union-attr]  # still open where the process died early
    proc.stderr.close()  # type: ignore[union-attr]
    proc.stdout.close()  # type: ignore[union-attr]
    return usage.ru_maxrss, proc.returncode, out[0].decode().splitlines()


def test_predict_streams_its_input_with_bounded_memory(text_classifier: Path) -> None:
    small = _peak(_predict_process(text_classifier), 20, 1)
    assert small[1] == 0 and len(small[2]) == 21
    # 400 MB of input (48 lines past the limit among 20,000 inputs): read whole, it took
    # several times that; streamed, the peak is about one chunk and one line above the small run
    lines, huge = 20_000, 48
    peak, status, rows = _peak(_predict_process(text_classifier), lines, huge)
    huge = len(range(0, lines, lines // huge))
    assert status == 0 and len(rows) == lines + 1
    grown_mb = (peak - small[0]) / 1024
    assert grown_mb < 150, f"peak memory grew by {grown_mb:.0f} MB for 400 MB of input"
    errors = [row for row in csv.reader(rows[1:]) if row[-1]]
    assert len(errors) == huge and all("a line longer than" in row[-1] for row in errors)


def test_predict_writes_rows_before_its_input_ends(text_classifier: Path) -> None:
    proc = _predict_process(text_classifier)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b"a good film\n" * (CHUNK_INPUTS + 10))
    proc.stdin.flush()
    got: queue.Queue[bytes] = queue.Queue()
    threading.Thread(target=lambda: got.put(proc.stdout.readline()), daemon=True).start()  # type: ignore[union-attr]
    try:
        header = got.get(timeout=120)  # the input is still open
    finally:
        proc.stdin.close()
        rest = proc.stdout.read()
        proc.wait(timeout=120)
        proc.stdout.close()
        proc.stderr.close()  # type: ignore[union-attr]
    assert header.decode().startswith("text,")
    assert proc.returncode == 0 and len(rest.splitlines()) == CHUNK_INPUTS + 10


def test_one_enormous_line_is_its_rows_error(text_classifier: Path, tmp_path: Path) -> None:
    for name, head in (("in.txt", ""), ("in.csv", "text,id\n")):
        path = tmp_path / name
        cells = ",1" if head else ""
        path.write_text(f"{head}a good film{cells}\n{HUGE}{cells}\nawful{cells}\n")
        rows = run_predict(text_classifier, str(path), tmp_path / "out.csv")
        assert [bool(r["error"]) for r in rows] == [False, True, False], name
        line = 3 if head else 2
        assert rows[1]["error"] == (
            f"{path}:{line}: a line longer than {MAX_LINE_BYTES:,} bytes; predict reads one "
            "input a line up to that"
        )


SMILES = ["CCO", "CCCC", "c1ccccc1", "CC(=O)O", "CCN", "OCCO", "c1ccncc1", "CC(C)O",
          "ClCCl", "CCOCC", "C1CCCCC1", "c1ccc2ccccc2c1", "CC#N", "CCCl", "O=C1CCCCC1",
          "Cc1ccccc1"]  # fmt: skip
ATOMS = "C" * 10_000  # 10⁴ atoms: 5.2 GiB of pair features
LONG = "C" * 131_073  # one character past Python's CSV field limit


@pytest.fixture(scope="module")
def molecule_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("mol")
    data = root / "train.csv"
    data.write_text("smiles,size\n" + "".join(f"{s},{len(s) / 10}\n" for s in SMILES))
    overrides = ["experiment=molecules_csv", f"dataset.path={data}", "dataset.targets=[size]",
                 "dataset.cache_dir=null", "trainer.epochs=1", "trainer.batch_size=8",
                 "trainer.progress=false", "trainer.plots=false", "model.atom_size=6",
                 "model.pair_size=4", "model.graph_size=6", "model.mlp_size=6"]  # fmt: skip
    run_train(compose_config(overrides, root / "run"))
    return root / "run"


def test_predict_gives_a_molecule_past_a_size_limit_its_rows_error(
    molecule_run: Path, tmp_path: Path
) -> None:
    path = tmp_path / "in.csv"
    path.write_text("smiles\nCCO\n" + ATOMS + "\n" + LONG + "\nCCN\n")
    rows = run_predict(molecule_run, str(path), tmp_path / "out.csv")
    assert [r["error"] for r in rows] == [
        "",
        "a molecule of 10,000 atoms, more than dataset.max_atoms=1000",
        "a SMILES of 131,073 characters, more than dataset.max_smiles_chars=20000",
        "",
    ]
    assert rows[0]["size"] and rows[3]["size"]


def test_training_treats_a_molecule_past_a_size_limit_as_an_invalid_row(tmp_path: Path) -> None:
    path = tmp_path / "mols.csv"
    body = "".join(f"{s},1\n" for s in ["CCO", ATOMS, "CCN", "C" * 30_000, LONG, "CCCl"])
    path.write_text("smiles,y\n" + body)
    csv.field_size_limit(131_072)  # Python's default (another test may have raised it)
    with pytest.raises(MoleculeError) as refused:  # dataset.on_invalid=error
        load_molecule_csv(path, target_columns="y")
    assert str(refused.value) == (
        f"{path}: 3 invalid SMILES (RDKit could not parse them, they hold spaces, or they pass a "
        "size limit): row 2 (line 3): a molecule of 10,000 atoms, more than dataset.max_atoms="
        "1000; row 4 (line 5): a SMILES of 30,000 characters, more than "
        "dataset.max_smiles_chars=20000; row 5 (line 6): a field longer than the CSV reader's "
        "limit of 131,072 characters (dataset.max_smiles_chars raises it); fix them, or drop "
        "these 3 of the 6 rows with dataset.on_invalid=skip (on_invalid='skip' in Python)"
    )
    with pytest.warns(UserWarning, match=r"3 invalid SMILES .*skipped"):  # on_invalid=skip
        kept = load_molecule_csv(path, target_columns="y", on_invalid="skip")
    assert kept.smiles == ["CCO", "CCN", "CCCl"] and [r for r, _ in kept.skipped] == [2, 4, 5]


@pytest.mark.parametrize(
    ("override", "says"),
    [("dataset.max_atoms=0", r"dataset\.max_atoms=0; expected 1 <= value <= 4096"),
     ("dataset.max_atoms=100000", r"dataset\.max_atoms=100000; expected 1 <= value <= 4096"),
     ("dataset.max_smiles_chars=0", r"dataset\.max_smiles_chars=0; expected")],
)  # fmt: skip
def test_the_size_limits_have_ranges(override: str, says: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=says):
        compose_config(["experiment=molecules_csv", "dataset.path=x.csv", override], tmp_path)


def test_csv_field_limit_follows_the_configured_maximum(tmp_path: Path) -> None:
    """With dataset.max_smiles_chars above 131,072 the reader reads such a field, and the
    molecule is judged by its atoms."""
    path = tmp_path / "mols.csv"
    path.write_text("smiles,y\nCCO,1\n" + LONG + ",2\nCCN,3\n")
    with pytest.warns(UserWarning, match="1 invalid SMILES"):
        kept = load_molecule_csv(
            path, target_columns="y", on_invalid="skip", max_smiles_chars=200_000, max_atoms=4096
        )
    assert kept.smiles == ["CCO", "CCN"]
    assert kept.skipped == ((2, "<a molecule of 131,073 atoms, more than dataset.max_atoms=4096>"),)


def test_a_long_quoted_field_across_lines_is_its_rows_error_alone(tmp_path: Path) -> None:
    """A quoted field past the reader's limit that spans lines: the reader stopped by its limit
    went on inside that field, and the whole file failed on a later row's field count."""
    path = tmp_path / "mols.csv"
    note = '"' + "a" * 140_000 + '\n bbbb"'
    path.write_text(f"smiles,y,note\nCCO,1,{note}\nCCN,2,short\nCCCl,3,\n")
    csv.field_size_limit(131_072)  # Python's default (another test may have raised it)
    with pytest.warns(UserWarning, match="1 invalid SMILES"):
        kept = load_molecule_csv(path, target_columns="y", on_invalid="skip")
    assert kept.smiles == ["CCN", "CCCl"]
    assert [r for r, _ in kept.skipped] == [1]
    assert "a field longer than the CSV reader's limit of 131,072" in kept.skipped[0][1]
