"""A molecule CSV's targets when ``dataset.targets`` names none: its numeric columns.

With no ``dataset.targets``, every column whose values are all numbers (blank, ``nan`` or ``NA``
missing; at least one given) is a target, except the SMILES column, the split column and
ID-like columns: a name such as ``id``, ``ID``, ``mol_id``, ``Compound ID``, ``name`` or
``index``, or a column counting the rows (0, 1, 2, … or 1, 2, 3, …: a saved DataFrame's
index). The choice is logged, with what was left out; a file with no such column is refused,
naming its columns. ``foldexp eval`` of a run takes the run's own targets instead.
"""

from __future__ import annotations

import csv
import io
import logging
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from foldexp.config.errors import ConfigError
from foldexp.data.delimiters import sniff_text_delimiter
from foldexp.data.molecule_csv import MISSING, allow_fields
from foldexp.data.textfile import read_text

__all__ = ["class_targets", "default_targets", "id_like"]

log = logging.getLogger(__name__)

MAX_CLASSES = 1000  # names in a column of classes at most (more: IDs or free text, not classes)

_ID_NAMES = re.compile(
    r"(.*[\s_\-.])?(id|ids|idx|index|name|names|cid|cas|inchi|inchikey|key|number|no|row)"
    r"|unnamed.*|compound|molecule|mol|title",
    re.IGNORECASE,
)


def id_like(name: str) -> bool:
    """Whether a column's name says it identifies rows rather than measures them."""
    return bool(_ID_NAMES.fullmatch(name.strip()))


def _numbers(values: list[str]) -> list[float] | None:
    """The column's values as numbers (missing ones left out); ``None`` if one is not."""
    out = []
    for text in values:
        text = text.strip()
        if text.lower() in MISSING:
            continue
        try:
            value = float(text)
        except ValueError:
            return None
        if not math.isnan(value):
            out.append(value)
    return out


def _counts_rows(values: list[float]) -> bool:
    n = len(values)
    return n > 2 and values in ([float(k) for k in range(n)], [float(k + 1) for k in range(n)])


def _table(path: Path) -> tuple[list[str], list[list[str]]]:
    """The header and each column's fields (the reader checks the rest when it reads)."""
    text = read_text(path)
    allow_fields(len(text) + 1)  # the reader measures its fields itself: none refused here
    rows = csv.reader(io.StringIO(text, newline=""), delimiter=sniff_text_delimiter(text))
    header = [h.strip() for h in next(rows, [])]
    columns: list[list[str]] = [[] for _ in header]
    for fields in rows:
        for k, field in enumerate(fields[: len(columns)]):
            columns[k].append(field)
    return header, columns


def default_targets(
    path: str | Path,
    targets: Any,
    smiles_column: str,
    split_column: str | None = None,
    trained: Mapping[str, Any] | None = None,
) -> Sequence[str]:
    """``targets`` when given; a trained run's (``trained``: its ``info``); else the file's
    numeric columns but the SMILES, split and ID-like ones (logged). A column of class names
    (``'(A) low'``, ``'(B) medium'``) becomes one 0/1 target per class, ``COLUMN=CLASS``
    (``class_targets``)."""
    unset = targets is None or (isinstance(targets, str) and targets.strip() in ("", "???"))
    if trained is not None and trained.get("target_names"):
        return _trained_targets(targets, [str(t) for t in trained["target_names"]], unset)
    path = Path(path)
    if not path.is_file() or (not unset and isinstance(targets, str)):
        return targets  # type: ignore[no-any-return]  # the reader says what is wrong
    header, columns = _table(path)
    if not unset:
        return class_targets(path, [str(t) for t in targets], header, columns)
    chosen, left = [], []
    for name, values in zip(header, columns, strict=True):
        if name in (smiles_column, split_column):
            continue
        if not name:  # an unnamed column (a saved DataFrame's index) names no target
            left.append(name)
            continue
        numbers = _numbers(values)
        if not numbers:
            continue  # text, or no value at all
        if id_like(name) or _counts_rows(numbers):
            left.append(name)
        else:
            chosen.append(name)
    if not chosen:
        raise ConfigError(
            f"dataset.targets is not set and {path} has no numeric column to take as a target "
            f"(its columns: {', '.join(repr(h) for h in header)}); name them: "
            "dataset.targets=[T1,T2]"
        )
    log.info(
        "dataset.targets not set: the numeric columns of %s are the targets: %s%s",
        path.name, ", ".join(chosen),
        f" (ID-like columns left out: {', '.join(map(repr, left))})" if left else "",
    )  # fmt: skip
    return chosen


def _trained_targets(targets: Any, names: list[str], unset: bool) -> Sequence[str]:
    """A trained run's targets for another file (``foldexp eval``): a column it trained as
    classes is read as those classes again (``COLUMN=CLASS``), whatever this file holds."""
    if unset:
        return names
    out: list[str] = []
    for target in (str(t) for t in targets):
        classes = [n for n in names if n.startswith(f"{target}=") and n not in targets]
        out.extend(classes or [target])
    return out


def class_targets(
    path: Path, targets: list[str], header: list[str], columns: list[list[str]]
) -> list[str]:
    """``targets`` with each column of class names (no value a number) replaced by one 0/1
    target per class, ``COLUMN=CLASS`` in sorted order (the molecule reader reads such a name as
    "this row's COLUMN is CLASS"), logged; a numeric column stays as it is."""
    out: list[str] = []
    for target in targets:
        if target not in header:
            out.append(target)  # the reader names the missing column
            continue
        values = columns[header.index(target)]
        classes = sorted({v.strip() for v in values if v.strip().lower() not in MISSING})
        if not classes or any(_numbers([c]) is not None for c in classes):
            out.append(target)  # numbers (one cell of text among them: the reader names it)
            continue
        if len(classes) > MAX_CLASSES:
            raise ConfigError(
                f"{path}: column {target!r} holds {len(classes)} different names, more than "
                f"{MAX_CLASSES} classes (IDs or free text?); a target column holds numbers, or "
                "class names"
            )
        log.info(
            "%s: column %r holds class names: one 0/1 target each (%s)",
            path.name, target, ", ".join(f"{target}={c}" for c in classes),
        )  # fmt: skip
        out.extend(f"{target}={c}" for c in classes)
    return out
