"""A target's name in its metrics' keys (``test_roc_auc_<target>``), the same in every output.

``target_suffixes`` is the one rule: a metric of one target is ``<split>_<metric>_<name>`` with
the target's name as the data file writes it (``NR-AR``), in ``metrics.csv``, ``results.json``,
the plots, ``results.md``, ``per_task.csv`` and ``predict``'s columns alike.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["target_suffixes"]


def target_suffixes(names: Sequence[str]) -> list[str]:
    """Target names as the suffixes of their metrics (``test_roc_auc_<name>``): the names as the
    data file writes them, so one name stands for a target everywhere (``NR-AR`` in
    ``metrics.csv``, ``results.json``, the plots, ``results.md``, ``per_task.csv`` and
    ``predict``'s columns) and each key leads back to its column. Names that were rewritten
    (``NR-AR`` → ``NR_AR``) had shared keys (``"a b"``, ``a_b`` → ``a_b_0``, ``a_b_1``); a name
    given twice, or none, is refused: their metrics could not be told apart."""
    plain = [str(name) for name in names]
    seen: set[str] = set()
    for k, name in enumerate(plain):
        if not name.strip():
            raise ValueError(
                f"target {k + 1} has no name (an empty column header): each target's metrics are "
                "named after it (test_rmse_<target>); name the column"
            )
        if name in seen:
            raise ValueError(
                f"target {name!r} is given twice: each target's metrics are named after it "
                "(test_rmse_<target>); give each target once"
            )
        seen.add(name)
    return plain
