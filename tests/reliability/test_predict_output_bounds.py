"""``foldexp predict``'s output: memory bounded by every cell kept, one name per column, and
never written over its own input or a run folder (issue 52, row 4 and two Low rows).

Before: a chunk was bounded by its inputs' bytes only, so 10,000 extra columns x 4,096 rows
(123 MB of input) peaked at 3.59 GB; a file with columns ``a b`` and ``input_a b`` (or ``error``
and ``predict_error``) gave a header naming a column twice; ``-o`` naming the input file
truncated it, and ``-o RUN/results.json`` replaced a run's results.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from foldexp.analysis import predict
from foldexp.analysis.predict import CHUNK_BYTES, run_predict
from foldexp.cli import main


def test_a_chunk_counts_every_kept_cell() -> None:
    wide = tuple("x" * 10 for _ in range(10_000))  # one tuple shared: the test stays small
    items = (("CCO", k, None, wide) for k in range(5000))
    first = next(predict._chunks(items))
    held = len(first) * sum(len(c) + 49 for c in wide)  # at least what CPython holds per str
    assert held <= 2 * CHUNK_BYTES, (len(first), held)
    assert len(first) < 100  # not the 4,096 inputs the chunk allowed before


def test_the_header_names_each_column_once(text_classifier: Path, tmp_path: Path) -> None:
    data = tmp_path / "in.csv"
    names = ["a b", "input_a b", "error", "predict_error", "text"]
    data.write_text(",".join(names[:-1]) + ",text\n1,2,3,4,a good film\n")
    out = tmp_path / "out.csv"
    run_predict(text_classifier, str(data), out)
    header = out.read_text().splitlines()[0].split(",")
    assert len(header) == len(set(header)), header
    assert header[:5] == ["text", "a b", "input_a b", "error", "predict_error"]
    assert header[-1] == "predict_error_2"
    header = predict._header("x", ["a b", "input_a b"], ["a b", "input_a b"])
    assert len(header) == len(set(header)) and header[0] == "x", header


@pytest.mark.parametrize("where", ["input", "run", "run_sub"])
def test_output_over_the_input_or_into_a_run_folder_is_refused(
    where: str, text_classifier: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "in.csv"
    data.write_text("text\na good film\n")
    target = {
        "input": data,
        "run": text_classifier / "results.json",
        "run_sub": text_classifier / "checkpoints" / "preds.csv",
    }[where]
    before = target.read_bytes() if target.exists() else None
    with pytest.raises(SystemExit) as exit_:
        main(["predict", str(text_classifier), str(data), "-o", str(target)])
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and len(err.splitlines()) == 1, err
    assert "--output" in err and ("input file" in err or "run folder" in err), err
    assert (target.read_bytes() if target.exists() else None) == before
