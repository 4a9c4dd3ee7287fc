"""A grid cell: one labelled unit of benchmark work producing CSV records.

Every experiment turns its config into a list of cells; ``run_bench`` runs them in order under
one progress bar, so the bar counts the whole grid whatever the preset.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Cell", "Record"]

Record = dict[str, Any]


@dataclass
class Cell:
    """``run()`` measures one point of the grid and returns its records (one per measurement)."""

    label: str
    run: Callable[[], list[Record]]
