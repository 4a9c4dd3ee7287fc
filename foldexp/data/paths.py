"""Where datasets live on disk.

All loaders take an explicit ``data_dir`` argument; when it is ``None`` they use
:func:`data_root`, which is ``$FOLDEXP_DATA`` if that is set and ``./data`` otherwise. The layout
under the root matches the shared test data::

    sst/train.txt, sst/dev.txt, sst/test.txt
    molecules/delaney-processed.csv, molecules/freesolv.csv
    wordvec/glove.6B.50d.sst_vocab.txt.gz
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["DATA_ENV_VAR", "data_root", "resolve_data_dir"]

DATA_ENV_VAR = "FOLDEXP_DATA"


def data_root() -> Path:
    """Return the default data directory: ``$FOLDEXP_DATA`` if set (non-empty), else ``./data``."""
    env = os.environ.get(DATA_ENV_VAR, "").strip()
    return Path(env).expanduser() if env else Path("data")


def resolve_data_dir(data_dir: str | os.PathLike[str] | None) -> Path:
    """Return ``data_dir`` as a :class:`~pathlib.Path`, or :func:`data_root` when it is ``None``."""
    return data_root() if data_dir is None else Path(data_dir).expanduser()
