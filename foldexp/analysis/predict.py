"""``foldexp predict RUN_DIR INPUT``: a trained run's predictions for new inputs, as a CSV.

INPUT is a CSV or CSV.gz holding the run's input column (its SMILES or text column, or
``--column``; comma, tab or semicolon separated, found as training finds it), a PTB file (one
tree a line) for tree models, calculator expressions (``(2+3)*4``, one a line) for calculator
runs, a plain text file with one input a line (a blank line is an empty
input: rows follow the file's lines), or ``-`` for standard input. The output has the input,
then one column per target or class (``prediction_columns()``: values in the targets' units, or
class probabilities), then ``error`` (``predict_error`` if a target has that name): an input
that cannot be read (an invalid SMILES, a malformed tree) gets a row with its error and empty
predictions, never a failure of the whole file. A CSV without the column, or with a record
wider than its header, is refused as a whole.

Inputs are batched through the engine (``collate`` + ``predict``), ``batch_size`` at a time; a
batch that fails as a whole is retried one input at a time, so one bad input costs its row only.
"""

from __future__ import annotations

import csv
import io
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from foldexp.blocks import InputError
from foldexp.data.delimiters import sample_lines, sniff_text_delimiter, table_width
from foldexp.data.textfile import decode_text, read_text
from foldexp.train.artifacts import write_text
from foldexp.train.runs import TrainedRun, load_trained

__all__ = ["run_predict", "read_inputs", "input_reader"]

Parsed = list[tuple[Any | None, str | None]]


def input_reader(
    run: TrainedRun, source: str = "<input>"
) -> tuple[str | None, Callable[[list[str]], Parsed]]:
    """The run's input column (``None``: one input a line) and its parser (texts → examples);
    ``source`` names the inputs' file in a tree's parse errors."""
    dataset = run.config["dataset"]
    target = str(dataset.get("_target_", ""))
    if "smiles_column" in dataset:
        from foldexp.experiments.molecule_data import molecule_inputs

        return str(dataset["smiles_column"]), molecule_inputs
    if "text_column" in dataset:
        from foldexp.experiments.text_data import text_inputs

        def texts(values: list[str]) -> Parsed:
            return text_inputs(values, dataset.get("tokenizer", "whitespace"), dataset["lowercase"])

        return str(dataset["text_column"]), texts
    if target.endswith(("trees_ptb", ".sst")):
        from foldexp.experiments.tree_inputs import tree_inputs

        def trees(lines: list[str]) -> Parsed:
            collapse = bool(dataset.get("collapse_unary", False))
            return tree_inputs(lines, collapse_unary=collapse, source=source)

        return None, trees
    if target.endswith(".calculator"):
        return None, _expressions
    raise ValueError(
        f"foldexp predict: {run.folder} was trained on {target}, whose inputs predict cannot "
        "read (it reads molecule CSVs, text CSVs, PTB trees and calculator expressions)"
    )


def _expressions(lines: list[str]) -> Parsed:
    """Calculator expressions, one a line (``(2+3)*4``): each a tree, or why it is not one."""
    from foldexp.data.calculator import parse_expression

    out: Parsed = []
    for line in lines:
        try:
            out.append((parse_expression(line), None))
        except ValueError as e:
            out.append((None, str(e)))
    return out


_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def read_inputs(path: str, column: str | None) -> tuple[str, list[str]]:
    """``(column name, inputs)`` of ``path``.

    With ``column`` (a molecule or text run): a CSV whose header names it (exactly, or in another
    case when one name alone matches), its separator found as training finds it (comma, tab or
    semicolon), gives that column of every non-blank record; a CSV whose header lacks it is
    refused, listing its columns; any other file is one input a line. Without ``column`` (a
    tree run) every line is an input. One input a line keeps blank lines (an "empty input" row
    each, so rows keep the file's line numbers) but drops those at the end.

    Raises:
        ValueError: a file that is not UTF-8 (naming the line) or a damaged gzip file (a
            ``TextFileError``), a CSV without the column, a record whose width differs from the
            header's (naming its line).
    """
    text = _read_text(path)
    if column is not None:
        found = _csv_column(path, text, column)
        if found is not None:
            return found
    # Line breaks only: ``str.splitlines`` also breaks at form feeds and U+2028, which would
    # shift every later row off its line number.
    lines = _LINE_BREAK.split(text)
    while lines and not lines[-1].strip():
        lines.pop()
    return column or "input", [line.strip() for line in lines]


def _read_text(path: str) -> str:
    """The text of ``path``, or of standard input for ``-``, read as training reads a file
    (``foldexp.data.textfile``: gzip by its magic bytes, UTF-8, a byte-order mark dropped)."""
    if path != "-":
        return read_text(path)
    raw = getattr(sys.stdin, "buffer", None)  # None: a text stream (already decoded)
    return sys.stdin.read() if raw is None else decode_text(raw.read(), "<stdin>")


def _csv_column(path: str, text: str, column: str) -> tuple[str, list[str]] | None:
    """``column`` of ``text`` read as a CSV; ``None`` when the text is not a CSV with a header
    (a list of inputs, one a line)."""
    delimiter = sniff_text_delimiter(text)
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    try:
        header = [name.strip() for name in next(reader, [])]
        index = _column_index(header, column)
        if index is None:
            if _is_table(text, delimiter, len(header)):
                names = ", ".join(repr(name) for name in header)
                raise ValueError(
                    f"{path}: no column {column!r} in the header ({names}); name the input "
                    "column with --column"
                )
            return None
        values = []
        start = reader.line_num + 1  # the line a record starts on (line_num: where it ends)
        for record in reader:
            if any(cell.strip() for cell in record):  # a blank record holds no input
                if len(record) != len(header):
                    raise ValueError(
                        f"{path}:{start}: {len(record)} fields, but the header has "
                        f"{len(header)}; quote a field that holds {delimiter!r}"
                    )
                values.append(record[index].strip())
            start = reader.line_num + 1
    except csv.Error as exc:
        raise ValueError(f"{path}:{reader.line_num}: not valid CSV: {exc}") from None
    return header[index], values


def _column_index(header: list[str], column: str) -> int | None:
    """Where ``column`` is in ``header``: by its exact name, else by the one name equal to it
    in another case (``smiles`` for ``SMILES``)."""
    if column in header:
        return header.index(column)
    folded = [i for i, name in enumerate(header) if name.casefold() == column.casefold()]
    return folded[0] if len(folded) == 1 else None


def _is_table(text: str, delimiter: str, width: int) -> bool:
    """A header of several fields whose next lines have as many: a CSV, not lines of text that
    happen to hold a comma."""
    return width > 1 and table_width(*sample_lines(text), delimiter) == width


def _predict_batch(run: TrainedRun, examples: Sequence[Any]) -> torch.Tensor:
    with torch.no_grad():
        return run.model.predict(run.model.collate(list(examples))).detach().cpu()


def _predict_all(run: TrainedRun, parsed: Parsed, batch_size: int, progress: bool) -> list[Any]:
    """One entry per input: a row of predictions or an error message."""
    results: list[Any] = [error for _, error in parsed]
    valid = [i for i, (example, _) in enumerate(parsed) if example is not None]
    starts = range(0, len(valid), batch_size)
    for start in tqdm(starts, desc="predict", unit="batch", disable=not progress):
        chunk = valid[start : start + batch_size]
        try:
            rows = _predict_batch(run, [parsed[i][0] for i in chunk])
        except (InputError, ValueError, KeyError, IndexError):
            rows = None  # retried one at a time below, so only the bad input loses its row
        for k, i in enumerate(chunk):
            if rows is not None:
                results[i] = rows[k].tolist()
                continue
            try:
                results[i] = _predict_batch(run, [parsed[i][0]])[0].tolist()
            except (InputError, ValueError, KeyError, IndexError) as exc:
                results[i] = _reason(exc)
    return results


def _reason(exc: Exception) -> str:
    """What went wrong with one input, for its row: a block's message and where inside the
    input, without the block's repr (a whole model) or the position in a batch of one."""
    if isinstance(exc, InputError):
        inside = "".join(f"[{p!r}]" for p in exc.path[1:])
        return f"{exc.message} (at input{inside})" if inside else exc.message
    return f"{type(exc).__name__}: {exc}"


def _csv_text(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue()


def run_predict(
    run_dir: str | Path,
    input_path: str,
    output: str | Path | None = None,
    *,
    column: str | None = None,
    batch_size: int = 256,
    allow_targets: Sequence[str] = (),
    progress: bool | None = None,
) -> list[dict[str, Any]]:
    """Predicts every input of ``input_path``; writes the CSV to ``output`` (stdout if None)
    and returns its rows as dicts."""
    if batch_size < 1:
        raise ValueError(f"--batch-size={batch_size}; expected a value >= 1")
    run = load_trained(run_dir, allow_targets)
    if not callable(getattr(run.model, "predict", None)):
        raise TypeError(
            f"foldexp predict: {type(run.model).__name__} has no predict(batch) method "
            "(foldexp.models.contract)"
        )
    run_column, parse = input_reader(run, "<stdin>" if input_path == "-" else input_path)
    name, values = read_inputs(input_path, column or run_column)
    columns = list(run.model.prediction_columns())
    outcomes = _predict_all(run, parse(values), batch_size, _show(progress))
    header = [name, *columns, _free_name("error", [name, *columns])]
    rows = []
    for value, outcome in zip(values, outcomes):
        if isinstance(outcome, list):
            rows.append([value, *outcome, ""])
        else:
            rows.append([value, *([""] * len(columns)), outcome or "unreadable input"])
    text = _csv_text(header, rows)
    if output is None:
        sys.stdout.write(text)
    else:
        write_text(output, text)
    return [dict(zip(header, row)) for row in rows]


def _free_name(name: str, taken: Sequence[str]) -> str:
    """``name``, or ``predict_<name>`` when an input or prediction column has it already."""
    return name if name not in taken else f"predict_{name}"


def _show(progress: bool | None) -> bool:
    return sys.stderr.isatty() if progress is None else progress
