"""The error every config check raises, and the one wording of a misspelt key.

``ConfigError`` is a config value outside its range, an unknown key or an unregistered target;
the commands report it as one line and exit with status 2. ``MissingFileError`` is the one of
them that depends on the machine (a file key naming no file). ``unknown_key`` words a key its
section lacks, with the closest keys as "did you mean".
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

__all__ = ["ConfigError", "MissingFileError", "unknown_key"]


class ConfigError(ValueError):
    """A config value outside its valid range, an unknown key or an unregistered target."""


def unknown_key(key: str, owner: str, keys: Sequence[str]) -> str:
    """One line for a key its section lacks: the closest keys (``difflib``) first, as "did you
    mean", then every key (those starting with ``_`` left out). The one wording of a misspelt
    key, whether Hydra refused the override (``trainer.epoch=3``) or a check here found it
    (``+trainer.epoch=3``, a run folder's config)."""
    name = key.rsplit(".", 1)[-1]
    prefix = key[: len(key) - len(name)]
    shown = [str(k) for k in keys if not str(k).startswith("_")]
    close = difflib.get_close_matches(name, shown, n=3, cutoff=0.6)
    if not close:  # a key written in another case: TRAINER.Epochs
        lower = {k.lower(): k for k in shown}
        close = [lower[c] for c in difflib.get_close_matches(name.lower(), list(lower), n=3)]
    hint = f"; did you mean {' or '.join(prefix + c for c in close)}? Its" if close else "; its"
    return f"{key} is not a key of {owner}{hint} keys are {', '.join(shown)}"


class MissingFileError(ConfigError):
    """A file key (``dataset.word_vectors``) naming a file that does not exist: apart from the
    other errors because it depends on the machine, not only on the config."""
