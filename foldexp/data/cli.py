"""Command line for ``foldexp data ...``: fetch, import and inspect datasets.

The top-level ``foldexp`` command dispatches ``foldexp data ARGS`` to :func:`main`; it can also be
run on its own as ``python -m foldexp.data.cli ARGS``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from foldexp.data.cache_bound import (
    CACHE_MAX_ENV,
    DEFAULT_MAX_MB,
    cache_files,
    clear_cache,
    default_cache_dir,
    max_cache_bytes,
)
from foldexp.data.errors import DataError
from foldexp.data.fetch import DATASETS
from foldexp.data.paths import DATA_ENV_VAR

__all__ = ["build_parser", "main"]

_EPILOG = f"""\
datasets:
  sst       Stanford Sentiment Treebank, PTB trees (sst/train.txt, dev.txt, test.txt)
  esol      ESOL / Delaney aqueous solubility (molecules/delaney-processed.csv)
  freesolv  FreeSolv hydration free energy (molecules/freesolv.csv)

Files of your own (checked and split exactly as `foldexp train` reads them):
  foldexp data stats molecules_csv path=FILE smiles_column=COL "targets=[T1,T2]"
  foldexp data stats trees_ptb path=DIR
  foldexp data import text_csv path=FILE text_column=COL label_column=COL

The data directory is --data-dir, else ${DATA_ENV_VAR}, else ./data.
Offline? Download the file elsewhere, then e.g.:
  foldexp data import sst ~/Downloads/trainDevTestTrees_PTB.zip
  foldexp data import esol ~/Downloads/delaney-processed.csv
"""


def build_parser(own_kinds: Sequence[str] = ()) -> argparse.ArgumentParser:
    """Return the ``foldexp data`` argument parser. ``own_kinds``: the datasets of one's own
    files (``molecules_csv``, ...) that ``foldexp data stats|import KIND key=value`` reads; the
    top-level command dispatches them before this parser, which lists them in its help."""
    parser = argparse.ArgumentParser(
        prog="foldexp data",
        description="Fetch, import and inspect the datasets used by foldexp.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--data-dir",
        metavar="DIR",
        default=None,
        help=f"data directory (default: ${DATA_ENV_VAR} if set, else ./data)",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    names = sorted(DATASETS)

    p = commands.add_parser(
        "fetch",
        help="download a dataset (needs internet)",
        description="Download a dataset from its public location into the data directory.",
    )
    p.add_argument("name", choices=names, help="dataset to download")
    p.add_argument("--force", action="store_true", help="download again even if present")

    p = commands.add_parser(
        "import",
        help="install a local copy of a dataset (works offline)",
        description=(
            "Check a local copy of a dataset and install it into the data directory. "
            "sst: the official trainDevTestTrees_PTB.zip or a folder with train/dev/test.txt; "
            "esol, freesolv: the CSV file."
        ),
    )
    p.add_argument("name", choices=[*names, *own_kinds], help=_kinds_help("import", own_kinds))
    p.add_argument("path", help="zip file, folder or CSV holding the dataset (or KEY=VALUE ...)")

    p = commands.add_parser(
        "stats",
        help="print statistics and save histograms",
        description="Print a table of dataset statistics and save histograms as a PNG.",
    )
    p.add_argument("name", choices=[*names, *own_kinds], help=_kinds_help("stats", own_kinds))
    p.add_argument(
        "--out",
        metavar="DIR",
        default="outputs/data-stats",
        help="folder for NAME.png (default: outputs/data-stats)",
    )
    p = commands.add_parser(
        "cache",
        help="list the featurisation cache's files, or remove them (--clear)",
        description="The molecule featurisation cache (paths.cache_dir: FOLDEXP_CACHE, else "
        "~/.cache/foldexp/data): its files, their sizes and last use, and its cap "
        f"({CACHE_MAX_ENV}, default {DEFAULT_MAX_MB} MB; the files used longest ago go first).",
    )
    p.add_argument("--clear", action="store_true", help="remove every cache file")
    p.add_argument("--dir", metavar="DIR", help="the cache folder (default: paths.cache_dir's)")
    return parser


def cache_command(folder: Path, clear: bool) -> int:
    """``foldexp data cache [--clear]``: the cache's files, or their removal."""
    if clear:
        count, size = clear_cache(folder)
        print(f"removed {count} cache file(s), {size / 2**20:.1f} MB, from {folder}")
        return 0
    files = cache_files(folder)
    for f in files:
        used = time.strftime("%Y-%m-%d %H:%M", time.localtime(f.used))
        print(f"{f.size / 2**20:10.1f} MB  last used {used}  {f.path.name}")
    total = sum(f.size for f in files)
    print(
        f"{folder}: {len(files)} file(s), {total / 2**20:.1f} MB of at most "
        f"{max_cache_bytes() / 2**20:.0f} MB ({CACHE_MAX_ENV}); foldexp data cache --clear "
        "removes them"
    )
    return 0


def _kinds_help(command: str, own_kinds: Sequence[str]) -> str:
    what = "dataset to describe" if command == "stats" else "dataset to import"
    if not own_kinds:
        return what
    return (
        f"{what}: a preset ({', '.join(sorted(DATASETS))}), or files of your own "
        f"({', '.join(own_kinds)}) given as KEY=VALUE, e.g. foldexp data {command} "
        f"{own_kinds[0]} path=FILE (see foldexp data --help)"
    )


def main(argv: list[str] | None = None, own_kinds: Sequence[str] = ()) -> int:
    """Run ``foldexp data`` with ``argv`` (without the leading ``data``); return the exit code.
    ``own_kinds``: listed in the help (``build_parser``)."""
    args = build_parser(own_kinds).parse_args(sys.argv[1:] if argv is None else argv)
    from foldexp.data import commands  # after parsing, so --help stays instant

    try:
        if args.command == "cache":
            return cache_command(Path(args.dir) if args.dir else default_cache_dir(), args.clear)
        if args.command == "fetch":
            return commands.fetch_command(args.name, args.data_dir, force=args.force)
        if args.command == "import":
            return commands.import_command(args.name, args.path, args.data_dir)
        return commands.stats_command(args.name, args.data_dir, args.out)
    except (DataError, OSError) as exc:  # both name the file: a message, not a traceback
        print(f"foldexp data {args.command}: error: {exc}", file=sys.stderr)
        return 2  # a user's error: one line and status 2, as every command


if __name__ == "__main__":
    sys.exit(main())
