"""Whether what a config asks for fits the machine's memory, checked before any data is built.

Each key may lie in its range while their product does not (``dataset.n_train`` sequences of
``max_len`` steps): ``check_memory`` refuses such a config in one line naming the keys, instead of
filling the memory until the system kills the run. It sits below ``foldexp.train`` because the
dataset builders (``foldexp.experiments.datasets``) call it as well as ``train/preflight.py``.
"""

from __future__ import annotations

import os

from foldexp.config.errors import ConfigError

__all__ = ["check_memory", "physical_memory"]


def physical_memory() -> int | None:
    """The machine's memory in bytes, or ``None`` where the system does not say."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None
    return total if total > 0 else None


def check_memory(need: int, what: str, fix: str) -> None:
    """Refuses what the config asks for when it would take more than the machine's memory:
    keys each in range whose product is not (``dataset.n_train`` sequences of ``max_len`` steps),
    which would otherwise fill the memory until the system kills the run. ``what`` names the
    keys and says what they make; ``fix`` what to change."""
    total = physical_memory()
    if total is not None and need > total:
        raise ConfigError(
            f"{what} take about {need / 2**30:.1f} GiB, more than the {total / 2**30:.1f} GiB "
            f"of memory of this machine; {fix}"
        )
