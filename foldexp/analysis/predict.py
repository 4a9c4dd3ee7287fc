"""``foldexp predict RUN_DIR INPUT``: a trained run's predictions for new inputs, as a CSV;
``foldexp fingerprint RUN_DIR INPUT``: the same rows with each input's learned representation
(``model.encode``: the readout before the head) in columns ``fp_0 …`` instead.

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
a whole is retried one input at a time, so one bad input costs its row only. Reading INPUT
(its column, parser and lines) is ``predict_inputs``'s job; this module predicts and writes.
"""

from __future__ import annotations

import csv
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import torch
from tqdm import tqdm

from foldexp.analysis.fingerprint_arrays import NpyRows, array_output, ids_path, write_arrays
from foldexp.analysis.predict_inputs import (
    Item,
    Parsed,
    Parser,
    check_columns,
    input_items,
    input_reader,
    open_input,
    source_name,
)
from foldexp.analysis.spread import load_members, spread_forward
from foldexp.blocks import InputError
from foldexp.data.cells import spreadsheet_row
from foldexp.models.contract import ModelContractError
from foldexp.train.artifacts import atomic_write
from foldexp.train.runs import TrainedRun

__all__ = ["CHUNK_BYTES", "CHUNK_INPUTS", "run_predict", "stream_predict"]

CHUNK_BYTES = 16 << 20  # at most this much input text is held at once (plus one line)
CHUNK_INPUTS = 4096  # ... and at most this many inputs


def _predict_batch(run: TrainedRun, examples: Sequence[Any]) -> torch.Tensor:
    with torch.no_grad():
        return run.model.predict(run.model.collate(list(examples))).detach().cpu()


def _encode_batch(run: TrainedRun, examples: Sequence[Any]) -> torch.Tensor:
    """``foldexp fingerprint``: each input's learned representation (``model.encode``)."""
    with torch.no_grad():
        return run.model.encode(run.model.collate(list(examples))).detach().float().cpu()


def _fingerprint_columns(run: TrainedRun) -> list[str]:
    """``fp_0 … fp_{D-1}``: a model with ``encode(batch)`` (the readout before its head, ``D =
    encode_size`` wide) gives them; any other is refused in one line."""
    size = getattr(run.model, "encode_size", None)
    if not callable(getattr(run.model, "encode", None)) or not isinstance(size, int):
        raise ModelContractError(
            f"{type(run.model).__name__} has no encode(batch) and "
            "encode_size (the readout before its head); model=dmpnn and model=weave have them"
        )
    return [f"fp_{k}" for k in range(size)]


def _predict_all(
    run: TrainedRun,
    parsed: Parsed,
    batch_size: int,
    forward: Callable[[TrainedRun, Sequence[Any]], torch.Tensor] = _predict_batch,
) -> list[Any]:
    """One entry per input: a row of predictions or an error message."""
    results: list[Any] = [error for _, error in parsed]
    valid = [i for i, (example, _) in enumerate(parsed) if example is not None]
    for start in range(0, len(valid), batch_size):
        chunk = valid[start : start + batch_size]
        try:
            rows = forward(run, [parsed[i][0] for i in chunk])
        except (InputError, ValueError, KeyError, IndexError):
            rows = None  # retried one at a time below, so only the bad input loses its row
        for k, i in enumerate(chunk):
            if rows is not None:
                results[i] = rows[k].tolist()
                continue
            try:
                results[i] = forward(run, [parsed[i][0]])[0].tolist()
            except (InputError, ValueError, KeyError, IndexError) as exc:
                results[i] = _reason(exc)
    return results


def _forget_traces(runs: Sequence[TrainedRun]) -> None:
    """A chunk's inputs never come back: drops the traces a model's compilers kept of them
    (``Compiler(cache_traces=True)``, the weave model's: one a molecule, which had grown a
    10,000-row fingerprint's memory from 0.96 to 2.2 GiB)."""
    for r in runs:
        for module in r.model.modules():
            cache = getattr(module, "trace_cache", None)
            if cache is not None:
                cache.clear()


def _reason(exc: Exception) -> str:
    """What went wrong with one input, for its row: a block's message and where inside the
    input, without the block's repr (a whole model) or the position in a batch of one."""
    if isinstance(exc, InputError):
        inside = "".join(f"[{p!r}]" for p in exc.path[1:])
        return f"{exc.message} (at input{inside})" if inside else exc.message
    return f"{type(exc).__name__}: {exc}"


#: What a kept cell costs beside its characters: a Python string object and its list slot.
_CELL_BYTES = 64


def _chunks(items: Iterator[Item]) -> Iterator[list[Item]]:
    """``items`` in lists of at most ``CHUNK_INPUTS`` inputs and about ``CHUNK_BYTES``, every
    cell kept counted (the input and the CSV's other columns: 10,000 of them had held 3.6 GB
    in a chunk bounded by its inputs alone)."""
    chunk: list[Item] = []
    size = 0
    for item in items:
        chunk.append(item)
        size += len(item[0]) + sum(len(cell) + _CELL_BYTES for cell in item[3]) + _CELL_BYTES
        if len(chunk) >= CHUNK_INPUTS or size >= CHUNK_BYTES:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


def _predict_chunk(
    run: TrainedRun,
    parse: Parser,
    chunk: list[Item],
    width: int,
    batch_size: int,
    forward: Callable[[TrainedRun, Sequence[Any]], torch.Tensor] = _predict_batch,
    kept: Sequence[str] = (),
) -> list[list[Any]]:
    """The output rows of ``chunk``: the input, its other cells (``kept``: their columns),
    ``width`` predictions (or blanks), the error."""
    readable = [k for k, item in enumerate(chunk) if item[2] is None]
    cells = [dict(zip(kept, chunk[k][3], strict=False)) for k in readable]
    parsed = parse([chunk[k][0] for k in readable], [chunk[k][1] for k in readable], cells)
    outcomes: list[Any] = [item[2] for item in chunk]
    for k, outcome in zip(readable, _predict_all(run, parsed, batch_size, forward), strict=True):
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
    fingerprint: bool = False,
    mc_dropout: int = 0,
    seed: int = 0,
) -> tuple[int, int]:
    """Predicts every input of ``input_path`` a chunk at a time, writing each chunk's rows to
    ``output`` (atomically: the file appears once every row is written) or to stdout (as they
    come); returns ``(rows, rows with an error)``. ``on_row`` sees each row as a dict.
    ``fingerprint``: the readout before the head (``fp_0 …``) instead of the predictions.
    ``run_dir`` a sweep folder (an ensemble of its runs) or ``mc_dropout`` passes (seeded with
    ``seed``): each prediction is the passes' mean, with its spread ``<column>_std``
    (``foldexp.analysis.spread``)."""
    if batch_size < 1:
        raise ValueError(f"--batch-size={batch_size}; expected a value >= 1")
    check_output(output, input_path)
    arrays = array_output(output, fingerprint)  # .npy/.npz: fingerprint_arrays.py
    if arrays:
        check_output(ids_path(output), input_path)  # type: ignore[arg-type]
    runs = load_members(run_dir, allow_targets, fingerprint)
    run = runs[0]
    if not callable(getattr(run.model, "predict", None)):
        raise TypeError(
            f"foldexp predict: {type(run.model).__name__} has no predict(batch) method "
            "(foldexp.models.contract)"
        )
    source = source_name(input_path)
    run_column, parse = input_reader(run, source)
    columns = _fingerprint_columns(run) if fingerprint else list(run.model.prediction_columns())
    forward = _encode_batch if fingerprint else _predict_batch
    if not fingerprint and (len(runs) > 1 or mc_dropout):  # mean and spread of the passes
        columns, forward = spread_forward(runs, columns, mc_dropout, seed)
    counts = [0, 0]

    def write(out: IO[str], values: NpyRows | None = None) -> None:
        with open_input(input_path) as stream:
            name, kept, items = input_items(stream, source, column or run_column)
            check_columns(run, kept, source)
            header = _header(name, kept, [] if values is not None else columns)
            writer = csv.writer(out, lineterminator="\n")
            writer.writerow(spreadsheet_row(header))
            bar = tqdm(desc="predict", unit="input", disable=not _show(progress))
            for chunk in _chunks(items):
                rows = _predict_chunk(run, parse, chunk, len(columns), batch_size, forward, kept)
                if values is not None:  # the numbers to the array, the rest to the CSV
                    rows = values.take(rows, 1 + len(kept), len(columns))
                _forget_traces(runs)
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
    elif arrays:
        write_arrays(output, len(columns), write)
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


def _header(name: str, kept: Sequence[str], columns: Sequence[str]) -> list[str]:
    """The output's header, each name once: the input column, the file's own columns (as they
    are, or ``input_<name>`` where a prediction or an earlier column has the name), the
    predictions, and ``error`` (``predict_error`` where taken); a name still taken gets ``_2``,
    ``_3``, … (``input_a b`` twice, ``predict_error`` twice had made a header a reader merges)."""
    taken = set(columns)

    def free(wanted: str, prefix: str) -> str:
        base = wanted if wanted not in taken else f"{prefix}{wanted}"
        out, k = base, 2
        while out in taken:
            out, k = f"{base}_{k}", k + 1
        taken.add(out)
        return out

    first = free(name, "input_")
    others = [free(k, "input_") for k in kept]
    return [first, *others, *columns, free("error", "predict_")]


def check_output(output: str | Path | None, input_path: str) -> None:
    """Refuses an output file that is the input itself, or one inside a run folder (a run's
    own files would be written over): before anything is read or written."""
    if output is None:
        return
    out = Path(output).absolute()
    if input_path != "-" and Path(input_path).exists():
        if out.exists() and out.samefile(input_path) or out.resolve() == Path(input_path).resolve():
            raise ValueError(
                f"--output {output} is the input file; write the predictions elsewhere"
            )
    for folder in out.resolve().parents:
        if any((folder / name).exists() for name in (".foldexp.lock", "run_info.json")):
            raise ValueError(
                f"--output {output} is inside the run folder {folder}; write the predictions "
                "outside run folders"
            )


def _show(progress: bool | None) -> bool:
    return sys.stderr.isatty() if progress is None else progress
