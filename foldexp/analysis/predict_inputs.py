"""Reading ``foldexp predict``'s INPUT: which column and parser a run takes, and its inputs.

``input_reader`` gives a trained run's input column (its SMILES or text column; ``None`` for
one input a line) and the parser that turns input texts into the run's examples.
``input_items`` reads INPUT — a CSV (separator found as training finds it, the run's column
found by name or by the one name equal to it in another case), a PTB file, calculator
expressions or plain lines — as items: each input's text, its line, why it cannot be read (a
line longer than ``MAX_LINE_BYTES``) and the CSV's other cells, streamed, never all in memory.
A CSV without the column, or with a record wider than its header, is refused as a whole
(``ValueError`` naming the file and line). ``read_inputs`` reads a whole file at once.
"""

from __future__ import annotations

import contextlib
import csv
import itertools
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import IO, Any

from foldexp.data.delimiters import sniff_delimiter, table_width
from foldexp.data.molecule_csv import MAX_ATOMS, MAX_SMILES_CHARS, allow_fields
from foldexp.data.textfile import bounded_lines, open_binary
from foldexp.train.runs import TrainedRun

__all__ = [
    "MAX_LINE_BYTES",
    "check_columns",
    "Item",
    "Parsed",
    "Parser",
    "input_items",
    "input_reader",
    "open_input",
    "read_inputs",
    "source_name",
]

Parsed = list[tuple[Any | None, str | None]]
#: Texts of inputs, their line numbers and their CSV's other cells by column → ``(example,
#: None)`` or ``(None, why)`` each (a molecule run's ``dataset.feature_columns`` are cells).
Parser = Callable[[list[str], list[int], list[Mapping[str, str]]], Parsed]
#: One input: its text, the line it starts on, why it cannot be read (``None``: it can), and the
#: cells of its CSV's other columns (an ID, a name: they come through to the output).
Item = tuple[str, int, str | None, tuple[str, ...]]

MAX_LINE_BYTES = 8 << 20  # a longer line is its row's error (a 10,000-level tree is ~60 KB)
_SAMPLE = 5  # lines after the header that vote on the separator (``delimiters``)


def input_reader(run: TrainedRun, source: str = "<input>") -> tuple[str | None, Parser]:
    """The run's input column (``None``: one input a line) and its parser (texts and their
    line numbers → examples); ``source`` names the inputs' file in a tree's parse errors."""
    dataset = run.config["dataset"]
    target = str(dataset.get("_target_", ""))
    if "smiles_column" in dataset:
        from foldexp.experiments.molecule_features import molecule_inputs, run_features
        from foldexp.experiments.molecule_set_inputs import run_smiles_columns, set_inputs

        limits = (
            int(dataset.get("max_atoms", MAX_ATOMS)),
            int(dataset.get("max_smiles_chars", MAX_SMILES_CHARS)),
        )
        extra = run_features(dataset)
        columns = run_smiles_columns(dataset)  # several: a row's molecules, one a column

        def molecules(
            values: list[str], lines: list[int], cells: list[Mapping[str, str]] | None = None
        ) -> Parsed:
            where = [f"{source}:{line}" for line in lines]
            first = molecule_inputs(values, *limits, extra, cells, where)
            return first if len(columns) == 1 else set_inputs(first, columns, cells, limits)

        return columns[0], molecules
    if "text_column" in dataset:
        from foldexp.experiments.text_data import text_inputs

        def texts(values: list[str], _: list[int], __: Any = None) -> Parsed:
            return text_inputs(values, dataset.get("tokenizer", "whitespace"), dataset["lowercase"])

        return str(dataset["text_column"]), texts
    if target.endswith(("trees_ptb", ".sst")):
        from foldexp.experiments.tree_inputs import tree_inputs

        def trees(lines: list[str], numbers: list[int], _: Any = None) -> Parsed:
            collapse = bool(dataset.get("collapse_unary", False))
            return tree_inputs(lines, collapse_unary=collapse, source=source, numbers=numbers)

        return None, trees
    if target.endswith(".calculator"):
        return None, _expressions
    raise ValueError(
        f"foldexp predict: {run.folder} was trained on {target}, whose inputs predict cannot "
        "read (it reads molecule CSVs, text CSVs, PTB trees and calculator expressions)"
    )


def _expressions(lines: list[str], _: list[int], __: Any = None) -> Parsed:
    """Calculator expressions, one a line (``(2+3)*4``): each a tree, or why it is not one."""
    from foldexp.data.calculator import parse_expression

    out: Parsed = []
    for line in lines:
        try:
            out.append((parse_expression(line), None))
        except ValueError as e:
            out.append((None, str(e)))
    return out


def check_columns(run: TrainedRun, kept: Sequence[str], source: str) -> None:
    """Refuses an input without a column the run's features read (``dataset.feature_columns``),
    naming the file, the column and the columns it has."""
    dataset = run.config["dataset"]
    smiles = dataset.get("smiles_column")
    for column in [] if isinstance(smiles, str) or not smiles else list(smiles)[1:]:
        if str(column) not in kept:  # several molecules a row: each column holds one
            raise ValueError(
                f"{source}: no column {column!r} in the header; the run reads a molecule from it "
                f"(dataset.smiles_column={list(smiles)}); the other columns are {list(kept)}"
            )
    wanted = dataset.get("feature_columns") or ()
    read = [*([] if isinstance(smiles, str) or not smiles else list(smiles)[1:]), *wanted]
    twice = [str(c) for c in read if list(kept).count(str(c)) > 1]
    if twice:  # training refuses such a header; a cell by name would be the last one's
        raise ValueError(
            f"{source}: column {twice[0]!r} is named twice in the header, and the run reads it "
            "(dataset.smiles_column, dataset.feature_columns): which one is meant is ambiguous"
        )
    missing = [str(c) for c in wanted if str(c) not in kept]
    if missing:
        raise ValueError(
            f"{source}: no column {missing[0]!r} in the header; the run reads it as a feature "
            f"(dataset.feature_columns={[str(c) for c in wanted]}); the other columns are "
            f"{list(kept)}"
        )


def read_inputs(path: str, column: str | None) -> tuple[str, list[str]]:
    """``(column name, inputs)`` of ``path``, every input in memory (``input_items`` streams
    them; a line too long to read is an empty input here)."""
    with open_input(path) as stream:
        name, _, items = input_items(stream, source_name(path), column)
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


def source_name(path: str) -> str:
    return "<stdin>" if path == "-" else path


@contextlib.contextmanager
def open_input(path: str) -> Iterator[IO[Any]]:
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
