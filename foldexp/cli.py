"""The ``foldexp`` command: a thin dispatcher over plain functions.

``foldexp demo`` runs the engine demo; ``foldexp data …`` manages datasets. Each subcommand
parses its own arguments and calls one function, so tests call those functions directly.
"""

from __future__ import annotations

import argparse
import sys

COMMANDS = {
    "demo": "print a batch schedule and the speedup of dynamic batching",
    "data": "fetch, import and describe datasets (foldexp data --help)",
}


def _demo(argv: list[str]) -> int:
    from foldexp.demo import run_demo

    ap = argparse.ArgumentParser(prog="foldexp demo", description=COMMANDS["demo"])
    ap.add_argument("--trees", type=int, default=64, help="trees per batch (default 64)")
    ap.add_argument("--leaves", type=int, default=32, help="leaves per tree (default 32)")
    ap.add_argument("--hidden", type=int, default=64, help="Tree-LSTM state size (default 64)")
    ap.add_argument("--repeats", type=int, default=3, help="timed repeats (default 3)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    run_demo(a.trees, a.leaves, a.hidden, a.repeats, a.seed)
    return 0


def _data(argv: list[str]) -> int:
    from foldexp.data.cli import main as data_main

    return data_main(argv)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: foldexp COMMAND [ARGS...]\n\ncommands:")
        for name, text in COMMANDS.items():
            print(f"  {name:<8s} {text}")
        print("\n`foldexp COMMAND --help` for the options of one command.")
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    handlers = {"demo": _demo, "data": _data}
    if cmd not in handlers:
        print(f"foldexp: unknown command {cmd!r}; commands: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    return handlers[cmd](rest)


if __name__ == "__main__":
    sys.exit(main())
