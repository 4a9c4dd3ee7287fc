"""Importing DGL for the ``dgl`` peer (``peer_torch.py``) where it is only half usable.

DGL 2.1 ships no graphbolt library for recent torch, and ``import dgl`` then fails on a missing
file; graphbolt (sampling pipelines) is unused by the peer, so an empty stand-in module takes its
place before DGL is imported again. ``Unavailable`` is what a peer raises when its library cannot
be imported here: the bench turns it into a "skipped" row.
"""

from __future__ import annotations

import sys
import types
from typing import Any

import torch

__all__ = ["Unavailable", "import_dgl"]


class Unavailable(Exception):
    """The peer's library is not installed or cannot be imported here."""


def import_dgl() -> Any:
    """``import dgl``, standing in an empty ``dgl.graphbolt`` when its library is missing;
    ``Unavailable`` when DGL still cannot be imported."""
    try:
        import dgl  # noqa: F401
    except FileNotFoundError:  # no graphbolt library for this torch: stand in an empty module
        for name in [n for n in sys.modules if n == "dgl" or n.startswith("dgl.")]:
            del sys.modules[name]
        stub = types.ModuleType("dgl.graphbolt")
        stub.__path__ = []  # type: ignore[attr-defined]
        stub.__file__ = "<graphbolt stand-in>"

        class _Any:
            def __init__(self, *a: Any, **k: Any) -> None:
                pass

            def __call__(self, *a: Any, **k: Any) -> Any:
                return _Any()

            def __getattr__(self, name: str) -> Any:
                if name.startswith("__"):
                    raise AttributeError(name)
                return _Any()

            def __mro_entries__(self, bases: Any) -> tuple:
                return (object,)

        def attr(name: str) -> Any:
            if name.startswith("__"):
                raise AttributeError(name)
            return _Any()

        stub.__getattr__ = attr  # type: ignore[method-assign]
        sys.modules["dgl.graphbolt"] = stub
    except ImportError as e:
        raise Unavailable(
            f"dgl is missing or incomplete ({e}); see the README for its install"
        ) from None
    try:
        import dgl
    except Exception as e:  # an import that still fails is a skip, never a bench failure
        raise Unavailable(f"dgl cannot be imported with torch {torch.__version__}: {e}") from None
    return dgl
