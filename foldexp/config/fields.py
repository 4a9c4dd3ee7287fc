"""Schema field helpers: valid ranges of numeric settings, and enum values as plain strings.

A schema field made with ``ranged`` (or ``positive``, ``non_negative``, ``probability``) carries
its valid interval in the dataclass field's metadata; ``foldexp.validate.check_config`` enforces
it when a config is composed, naming the key, the value and the range.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

__all__ = ["Range", "enum_value", "non_negative", "positive", "probability", "ranged"]


@dataclass(frozen=True)
class Range:
    """The valid interval of a numeric config value (bounds ``None`` are open)."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None

    def allows(self, value: float) -> bool:
        return not (
            (self.ge is not None and value < self.ge)
            or (self.gt is not None and value <= self.gt)
            or (self.le is not None and value > self.le)
            or (self.lt is not None and value >= self.lt)
        )

    def describe(self) -> str:
        """E.g. ``a value > 0``, ``0 <= value < 1``."""
        low = (
            f"{self.ge} <= "
            if self.ge is not None
            else f"{self.gt} < "
            if self.gt is not None
            else ""
        )
        high = (
            f" <= {self.le}"
            if self.le is not None
            else f" < {self.lt}"
            if self.lt is not None
            else ""
        )
        if low and not high:  # one bound reads better with the value first
            return f"a value {'>=' if self.ge is not None else '>'} {low.split()[0]}"
        return f"{low}value{high}"


def ranged(default: Any, *, ge=None, gt=None, le=None, lt=None, none_ok: bool = False) -> Any:
    """A schema field whose numeric value (or every element of a list value) must lie in the
    range; ``foldexp.validate.check_config`` enforces it when the config is composed."""
    meta = {"range": Range(ge, gt, le, lt), "none_ok": none_ok}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)


def positive(default: Any) -> Any:
    """> 0 (an integer key: >= 1)."""
    return ranged(default, gt=0)


def non_negative(default: Any) -> Any:
    """>= 0 (for most such keys 0 turns the feature off)."""
    return ranged(default, ge=0)


def probability(default: Any, none_ok: bool = False) -> Any:
    """0 <= p < 1 (a dropout rate, a mixing weight)."""
    return ranged(default, ge=0, lt=1, none_ok=none_ok)


def enum_value(value: Any) -> str:
    """A choice from a config as its plain string.

    OmegaConf keeps a schema's enum fields as enum members (``DeviceName.cpu``), whose ``str`` is
    the member's name with its class; a plain string (a config read back from a run folder, or
    built by hand) passes through unchanged.
    """
    return str(value.value) if isinstance(value, Enum) else str(value)
