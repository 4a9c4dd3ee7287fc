"""``foldexp bench``: timing benchmarks -- the Fold paper's Table 1, scaling, peers, DyNet tasks.

``run_bench(cfg)`` runs a composed config (``foldexp/conf/bench.yaml`` and its presets under
``foldexp/conf/bench/``) and returns the tidy frame it writes to ``bench.csv``;
``redraw(run_dir)`` redraws every plot of a run from that CSV alone.
"""

from __future__ import annotations

from typing import Any

from foldexp.bench.results import CSV_NAME

__all__ = ["run_bench", "redraw", "CSV_NAME"]


def run_bench(cfg: Any) -> Any:
    """See ``foldexp.bench.run.run_bench`` (imported on use, so this package imports cheaply)."""
    from foldexp.bench.run import run_bench as _run

    return _run(cfg)


def redraw(run_dir: Any) -> Any:
    """See ``foldexp.bench.plots.redraw``."""
    from foldexp.bench.plots import redraw as _redraw

    return _redraw(run_dir)
