"""``textfile.bounded_lines``: every line break ``open(newline="")`` knows, within a bound."""

from __future__ import annotations

import io
import random
import re

import pytest

from foldexp.data.textfile import bounded_lines

LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+")


def expected(text: str, limit: int) -> list[tuple[int, str | None]]:
    """The lines of the whole text; a line is too long past ``limit`` characters with its
    break (one more when the break ends in ``\\n``: ``readline(limit + 1)`` holds it)."""
    lines = LINE.findall(text.removeprefix("\ufeff"))
    fits = [len(x) <= limit or (len(x) == limit + 1 and x.endswith("\n")) for x in lines]
    return [(i, x if ok else None) for i, (x, ok) in enumerate(zip(lines, fits), 1)]


def random_text(rng: random.Random) -> str:
    breaks = ["\r", "\n", "\r\n", ""]
    return "".join("x" * rng.randint(0, 20) + rng.choice(breaks) for _ in range(rng.randint(0, 9)))


@pytest.mark.parametrize("kind", ["bytes", "text"])
def test_any_mix_of_breaks_and_long_lines_reads_as_the_whole_text_splits(kind: str) -> None:
    rng = random.Random(0)
    for _ in range(2000):
        limit, text = rng.randint(2, 12), random_text(rng)
        stream = io.BytesIO(text.encode()) if kind == "bytes" else io.StringIO(text, newline="")
        assert list(bounded_lines(stream, "s", limit)) == expected(text, limit), (limit, text)


def test_a_file_whose_lines_end_at_cr_alone_is_read_line_by_line() -> None:
    """Old Mac Excel's CSVs: ``readline`` ends nothing at ``\\r``, and such a file past the
    bound came as one line, too long."""
    data = b"\xef\xbb\xbfsmiles\r" + b"CCO\r" * 10_000
    lines = list(bounded_lines(io.BytesIO(data), "mols.csv", 64))
    assert len(lines) == 10_001
    assert lines[0] == (1, "smiles\r") and lines[-1] == (10_001, "CCO\r")
