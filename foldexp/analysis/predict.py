"""``foldexp predict RUN_DIR INPUT``: a trained run's predictions for new inputs, as a CSV.

INPUT is a CSV or CSV.gz holding the run's input column (its SMILES or text column, or
``--column``; comma, tab or semicolon separated, found as training finds it), a PTB file (one
tree a line) for tree models, calculator expressions (``(2+3)*4``, one a line) for calculator
runs, a plain text file with one input a line (a blank line is an empty input: rows follow the
file's lines), or ``-`` for standard input. The output has the input, then the CSV's other
columns as they are (an ID or a name comes through; one whose name a prediction column has is
``input_<name>``), then one column per target or class (``prediction_columns()``: values in
the targets' units, or class probabilities), then ``error`` (``predict_error`` if a target
has that name): an input that cannot be read (an invalid SMILES, a malformed tree, a molecule
past the run's size limits) gets a row with its error and empty predictions, never a failure
of the whole file. A CSV without the column, or with a record wider than its header, is
refused as a whole. Text cells that a spreadsheet would run as a formula are written behind a
quote (``foldexp.data.cells``).

The input is streamed (``stream_predict``): read ``CHUNK_INPUTS`` inputs (or ``CHUNK_BYTES``)
at a time, predicted, and their rows written before the next chunk is read, so memory stays
bounded whatever the input's size and the first rows come out before the input ends. A line
longer than ``MAX_LINE_BYTES`` is skipped to its end and is that row's error. Inputs are batched
through the engine (``collate`` + ``predict``), ``batch_size`` at a time; a batch that fails as
a whole is retried one input at a time, so one bad input costs its row only.
"""

from __future__ import annotations

import contextlib
import csv
import itertools
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import torch
from tqdm import tqdm

from foldexp.blocks import InputError
from foldexp.data.cells import spreadsheet_row
from foldexp.data.delimiters import sniff_delimiter, table_width
from foldexp.data.molecule_csv import MAX_ATOMS, MAX_SMILES_CHARS, allow_fields
from foldexp.data.textfile import bounded_lines, open_binary
from foldexp.train.artifacts import atomic_write
from foldexp.train.runs import TrainedRun, load_trained

__all__ = [
    "CHUNK_BYTES",
    "MAX_LINE_BYTES",
    "run_predict",
    "read_inputs",
    "input_reader",
    "stream_predict",
]

Parsed = list[tuple[Any | None, str | None]]
#: Texts of inputs and their line numbers → ``(example, None)`` or ``(None, why)`` each.
Parser = Callable[[list[str], list[int]], Parsed]
#: One input: its text, the line it starts on, why it cannot be read (``None``: it can), and the
#: cells of its CSV's other columns (an ID, a name: they come through to the output).
Item = tuple[str, int, str | None, tuple[str, ...]]

MAX_LINE_BYTES = 8 << 20  # a longer line is its row's error (a 10,000-level tree is ~60 KB)
CHUNK_BYTES = 16 << 20  # at most this much input text is held at once (plus one line)
CHUNK_INPUTS = 4096  # ... and at most this many inputs
_SAMPLE = 5  # lines after the header that vote on the separator (``delimiters``)


def input_reader(run: TrainedRun, source: str = "<input>") -> tuple[str | None, Parser]:
    """The run's input column (``None``: one input a line) and its parser (texts and their
    line numbers → examples); ``source`` names the inputs' file in a tree's parse errors."""
    dataset = run.config["dataset"]
    target = str(dataset.get("_target_", ""))
    if "smiles_column" in dataset:
        from foldexp.experiments.molecule_data import molecule_inputs

        limits = (
            int(dataset.get("max_atoms", MAX_ATOMS)),
            int(dataset.get("max_smiles_chars", MAX_SMILES_CHARS)),
        )

        def molecules(values: list[str], _: list[int]) -> Parsed:
            return molecule_inputs(values, *limits)

        return str(dataset["smiles_column"]), molecules
    if "text_column" in dataset:
        from foldexp.experiments.text_data import text_inputs

        def texts(values: list[str], _: list[int]) -> Parsed:
            return text_inputs(values, dataset.get("tokenizer", "whitespace"), dataset["lowercase"])

        return str(dataset["text_column"]), texts
    if target.endswith(("trees_ptb", ".sst")):
        from foldexp.experiments.tree_inputs import tree_inputs

        def trees(lines: list[str], numbers: list[int]) -> Parsed:
            collapse = bool(dataset.get("collapse_unary", False))
            return tree_inputs(lines, collapse_unary=collapse, source=source, numbers=numbers)

        return None, trees
    if target.endswith(".calculator"):
        return None, _expressions
    raise ValueError(
        f"foldexp predict: {run.folder} was trained on {target}, whose inputs predict cannot "
        "read (it reads molecule CSVs, text CSVs, PTB trees and calculator expressions)"
    )


def _expressions(lines: list[str], _: list[int]) -> Parsed:
    """Calculator expressions, one a line (``(2+3)*4``): each a tree, or why it is not one."""
    from foldexp.data.calculator import parse_expression

    out: Parsed = []
    for line in lines:
        try:
            out.append((parse_expression(line), None))
        except ValueError as e:
            out.append((None, str(e)))
    return out


def read_inputs(path: str, column: str | None) -> tuple[str, list[str]]:
    """``(column name, inputs)`` of ``path``, every input in memory (``input_items`` streams
    them; a line too long to read is an empty input here)."""
    with _open(path) as stream:
        name, _, items = input_items(stream, _source(path), column)
        return name, [item[0] for item in items]


def input_items(
    stream: IO[Any], source: str, column: str | None
) -> tuple[str, list[str], Iterator[Item]]:
    """``(column name, the CSV's other columns, inputs)`` of a stream, the inputs read as they
    are consumed (a file of one input a line has no other columns).

    With ``column`` (a molecule or text run): a CSV whose header names it (exactly, or in another
    case when one name alone matches), its separator found as training finds it (comma, tab or
    semicolon), gives that column of every non-blank record; a CSV whose header lacks it is
    refused, listing its columns; any other file is one input a line. Without ``column`` (a
    tree run) every line is an input. One input a line keeps blank lines (an "empty input" row
    each, so rows keep the file's line numbers) but drops those at the end. A line longer than
    ``MAX_LINE_BYTES`` is an input whose error says so.

    Raises (when the place is reached):
        ValueError: a file that is not UTF-8 (naming the line) or a damaged gzip file (a
            ``TextFileError``), a CSV without the column, a record whose width differs from the
            header's (naming its line).
    """
    lines = bounded_lines(stream, source, MAX_LINE_BYTES)
    peeked: list[tuple[int, str | None]] = []  # the header and the lines that vote on it
    for entry in lines:
        peeked.append(entry)
        voters = sum(1 for _, x in peeked[1:] if x and x.strip())  # blank lines do not vote
        if voters >= _SAMPLE or len(peeked) >= 64:
            break
    lines = itertools.chain(peeked, lines)
    if column is not None:
        found = _csv_items(source, peeked, lines, column)
        if found is not None:
            return found
    return column or "input", [], _line_items(lines, source)


def _too_long(source: str, number: int) -> str:
    return (
        f"{source}:{number}: a line longer than {MAX_LINE_BYTES:,} bytes; "
        "predict reads one input a line up to that"
    )


def _line_items(lines: Iterable[tuple[int, str | None]], source: str) -> Iterator[Item]:
    """Every line an input, stripped; blank lines held back until a line follows them (those
    at the end are dropped)."""
    blanks: list[int] = []
    for number, line in lines:
        if line is not None and not line.strip():
            blanks.append(number)
            continue
        yield from (("", k, None, ()) for k in blanks)
        blanks = []
        yield (
            ("", number, _too_long(source, number), ())
            if line is None
            else (line.strip(), number, None, ())
        )


def _csv_items(
    source: str,
    peeked: list[tuple[int, str | None]],
    lines: Iterator[tuple[int, str | None]],
    column: str,
) -> tuple[str, list[str], Iterator[Item]] | None:
    """``column`` of the lines read as a CSV, and its other columns; ``None`` when they are
    not a CSV with a header (a list of inputs, one a line)."""
    sample = [line or "" for _, line in peeked]
    header_line = sample[0].rstrip("\r\n") if sample else ""
    rows = [x.rstrip("\r\n") for x in sample[1:] if x.strip()][:_SAMPLE]
    delimiter = sniff_delimiter(header_line, rows)
    try:
        header = [name.strip() for name in next(csv.reader([header_line], delimiter=delimiter), [])]
    except csv.Error as exc:
        raise ValueError(f"{source}:1: not valid CSV: {exc}") from None
    index = _column_index(header, column)
    if index is None:
        if len(header) > 1 and table_width(header_line, rows, delimiter) == len(header):
            names = ", ".join(repr(name) for name in header)
            raise ValueError(
                f"{source}: no column {column!r} in the header ({names}); name the input "
                "column with --column"
            )
        return None  # nothing read past the peeked lines: they are inputs, one a line
    allow_fields(MAX_LINE_BYTES)  # a field as long as a line: the line limit is the one
    reader = csv.reader(_marked_lines(lines), delimiter=delimiter)
    next(reader, None)  # the header, read above
    others = [name for j, name in enumerate(header) if j != index]
    return header[index], others, _records(source, reader, header, index, delimiter)


_TOO_LONG = "\ufffe\ufffe foldexp: line too long \ufffe\ufffe"  # stands for a skipped line


def _marked_lines(lines: Iterable[tuple[int, str | None]]) -> Iterator[str]:
    for _, line in lines:
        yield _TOO_LONG + "\n" if line is None else line


def _records(
    source: str, reader: Any, header: list[str], index: int, delimiter: str
) -> Iterator[Item]:
    start = reader.line_num + 1  # the line a record starts on (line_num: where it ends)
    try:
        for record in reader:
            if any(_TOO_LONG in cell for cell in record):
                yield "", start, _too_long(source, start), ("",) * (len(header) - 1)
            elif any(cell.strip() for cell in record):  # a blank record holds no input
                if len(record) != len(header):
                    raise ValueError(
                        f"{source}:{start}: {len(record)} fields, but the header has "
                        f"{len(header)}; quote a field that holds {delimiter!r}"
                    )
                kept = tuple(cell for j, cell in enumerate(record) if j != index)
                yield record[index].strip(), start, None, kept
            start = reader.line_num + 1
    except csv.Error as exc:
        raise ValueError(f"{source}:{reader.line_num}: not valid CSV: {exc}") from None


def _source(path: str) -> str:
    return "<stdin>" if path == "-" else path


@contextlib.contextmanager
def _open(path: str) -> Iterator[IO[Any]]:
    """``path``'s binary stream (gunzipped as read), or standard input's (a text stream, as
    tests give it, is read as text)."""
    raw = getattr(sys.stdin, "buffer", None) if path == "-" else path
    if path == "-" and raw is None:
        yield sys.stdin
        return
    with open_binary(raw) as stream:
        yield stream


def _column_index(header: list[str], column: str) -> int | None:
    """Where ``column`` is in ``header``: by its exact name, else by the one name equal to it
    in another case (``smiles`` for ``SMILES``)."""
    if column in header:
        return header.index(column)
    folded = [i for i, name in enumerate(header) if name.casefold() == column.casefold()]
    return folded[0] if len(folded) == 1 else None


def _predict_batch(run: TrainedRun, examples: Sequence[Any]) -> torch.Tensor:
    with torch.no_grad():
        return run.model.predict(run.model.collate(list(examples))).detach().cpu()


def _predict_all(run: TrainedRun, parsed: Parsed, batch_size: int) -> list[Any]:
    """One entry per input: a row of predictions or an error message."""
    results: list[Any] = [error for _, error in parsed]
    valid = [i for i, (example, _) in enumerate(parsed) if example is not None]
    for start in range(0, len(valid), batch_size):
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


def _chunks(items: Iterator[Item]) -> Iterator[list[Item]]:
    """``items`` in lists of at most ``CHUNK_INPUTS`` inputs and about ``CHUNK_BYTES``."""
    chunk: list[Item] = []
    size = 0
    for item in items:
        chunk.append(item)
        size += len(item[0])
        if len(chunk) >= CHUNK_INPUTS or size >= CHUNK_BYTES:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


def _predict_chunk(
    run: TrainedRun, parse: Parser, chunk: list[Item], width: int, batch_size: int
) -> list[list[Any]]:
    """The output rows of ``chunk``: the input, its other cells, ``width`` predictions (or
    blanks), the error."""
    readable = [k for k, item in enumerate(chunk) if item[2] is None]
    parsed = parse([chunk[k][0] for k in readable], [chunk[k][1] for k in readable])
    outcomes: list[Any] = [item[2] for item in chunk]
    for k, outcome in zip(readable, _predict_all(run, parsed, batch_size), strict=True):
        outcomes[k] = outcome
    rows = []
    for (value, _, _, kept), outcome in zip(chunk, outcomes, strict=True):
        if isinstance(outcome, list):
            rows.append([value, *kept, *outcome, ""])
        else:
            rows.append([value, *kept, *([""] * width), outcome or "unreadable input"])
    return rows


def stream_predict(
    run_dir: str | Path,
    input_path: str,
    output: str | Path | None = None,
    *,
    column: str | None = None,
    batch_size: int = 256,
    allow_targets: Sequence[str] = (),
    progress: bool | None = None,
    on_row: Callable[[dict[str, Any]], None] | None = None,
) -> tuple[int, int]:
    """Predicts every input of ``input_path`` a chunk at a time, writing each chunk's rows to
    ``output`` (atomically: the file appears once every row is written) or to stdout (as they
    come); returns ``(rows, rows with an error)``. ``on_row`` sees each row as a dict."""
    if batch_size < 1:
        raise ValueError(f"--batch-size={batch_size}; expected a value >= 1")
    run = load_trained(run_dir, allow_targets)
    if not callable(getattr(run.model, "predict", None)):
        raise TypeError(
            f"foldexp predict: {type(run.model).__name__} has no predict(batch) method "
            "(foldexp.models.contract)"
        )
    source = _source(input_path)
    run_column, parse = input_reader(run, source)
    columns = list(run.model.prediction_columns())
    counts = [0, 0]

    def write(out: IO[str]) -> None:
        with _open(input_path) as stream:
            name, kept, items = input_items(stream, source, column or run_column)
            # the file's own columns come through, renamed where a prediction has the name
            kept = [f"input_{k}" if k in columns or k == name else k for k in kept]
            header = [name, *kept, *columns, _free_name("error", [name, *kept, *columns])]
            writer = csv.writer(out, lineterminator="\n")
            writer.writerow(spreadsheet_row(header))
            bar = tqdm(desc="predict", unit="input", disable=not _show(progress))
            for chunk in _chunks(items):
                rows = _predict_chunk(run, parse, chunk, len(columns), batch_size)
                writer.writerows(spreadsheet_row(row) for row in rows)
                out.flush()  # the rows so far reach a pipe before the rest is read
                counts[0] += len(rows)
                counts[1] += sum(1 for row in rows if row[-1])
                bar.update(len(rows))
                for row in rows if on_row is not None else ():
                    on_row(dict(zip(header, row)))
            bar.close()

    if output is None:
        write(sys.stdout)
    else:

        def to_file(tmp: str) -> None:
            with open(tmp, "w", encoding="utf-8", newline="") as out:
                write(out)

        atomic_write(output, to_file)
    return counts[0], counts[1]


def run_predict(
    run_dir: str | Path,
    input_path: str,
    output: str | Path | None = None,
    **options: Any,
) -> list[dict[str, Any]]:
    """``stream_predict``, returning every row as a dict (in memory: for a library caller's
    modest inputs; the command streams). ``options``: ``stream_predict``'s keywords."""
    rows: list[dict[str, Any]] = []
    stream_predict(run_dir, input_path, output, on_row=rows.append, **options)
    return rows


def _free_name(name: str, taken: Sequence[str]) -> str:
    """``name``, or ``predict_<name>`` when an input or prediction column has it already."""
    return name if name not in taken else f"predict_{name}"


def _show(progress: bool | None) -> bool:
    return sys.stderr.isatty() if progress is None else progress
