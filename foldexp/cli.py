"""The ``foldexp`` command: a thin dispatcher over plain functions.

``foldexp train`` and ``foldexp bench`` are Hydra apps (all of Hydra's command line works);
``foldexp data``, ``report``, ``ensemble``, ``predict``, ``eval`` and ``demo`` take plain
arguments. Each subcommand
calls one plain function (``run_train``, ``run_bench``, ``run_report``, …), so tests call those
functions directly.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable
from pathlib import Path

COMMANDS = {
    "train": "train a model: a Hydra app (foldexp train --help, key=value overrides, -m sweeps)",
    "bench": "timing benchmarks: the paper's Table 1, scaling, peers (foldexp bench --help)",
    "report": "aggregate runs or a sweep folder into a table and a plot (foldexp report DIR)",
    "ensemble": "average the predictions of a sweep's runs (foldexp ensemble DIR)",
    "predict": "a trained run's predictions for new inputs, as CSV (foldexp predict RUN_DIR INPUT)",
    "eval": "score a trained run on a split or another file (foldexp eval RUN_DIR [key=value])",
    "fingerprint": "each input's learned representation, as CSV (foldexp fingerprint RUN INPUT)",
    "demo": "print a batch schedule and the speedup of dynamic batching",
    "data": "fetch, import and describe datasets (foldexp data --help)",
}


def integer(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse ``type``: an integer in ``low..high``, else argparse's one-line error naming
    the option (``argument --trees: 0; expected 1 <= value <= 1024``), status 2."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low or (high is not None and value > high):
            allowed = f"{low} <= value <= {high}" if high is not None else f"a value >= {low}"
            raise argparse.ArgumentTypeError(f"{value}; expected {allowed}")
        return value

    return parse


#: The demo's sizes: each at most this, and a batch's trees x leaves x state at most
#: ``_DEMO_CELLS`` (64 x 32 x 64 = 2**17 by default): a tensor of the batch then stays under
#: 0.5 GB, where --leaves 100000000 had run until stopped.
_DEMO_MAX = 1024
_DEMO_CELLS = 2**27


def _demo(argv: list[str]) -> int:
    from foldexp.config import MAX_SEED
    from foldexp.demo import run_demo

    size = integer(1, _DEMO_MAX)
    ap = argparse.ArgumentParser(prog="foldexp demo", description=COMMANDS["demo"])
    ap.add_argument("--trees", type=size, default=64, help="trees per batch (default 64)")
    ap.add_argument("--leaves", type=size, default=32, help="leaves per tree (default 32)")
    ap.add_argument("--hidden", type=size, default=64, help="Tree-LSTM state size (default 64)")
    ap.add_argument("--repeats", type=integer(1, 100), default=3, help="timed repeats (default 3)")
    ap.add_argument("--seed", type=integer(0, MAX_SEED), default=0)
    a = ap.parse_args(argv)
    if a.trees * a.leaves * a.hidden > _DEMO_CELLS:
        ap.error(
            f"--trees {a.trees} x --leaves {a.leaves} x --hidden {a.hidden} is "
            f"{a.trees * a.leaves * a.hidden}; expected at most {_DEMO_CELLS} (a tensor of the "
            "batch would not stay under 0.5 GB)"
        )
    run_demo(a.trees, a.leaves, a.hidden, a.repeats, a.seed)
    return 0


def _hydra_app(name: str, module: str) -> object:
    def run(argv: list[str]) -> int:
        import importlib

        from hydra.errors import HydraException
        from omegaconf.errors import OmegaConfBaseException

        from foldexp.config.hydra_errors import (
            composing,
            hydra_message,
            launcher_error,
            launcher_missing,
            removed_group,
            still_composing,
        )

        if name == "train":  # --resume RUN_DIR: the run's own overrides (train/resume_command.py)
            from foldexp.train.resume_command import expand_resume

            try:
                argv = expand_resume(argv)
            except ValueError as exc:
                print(f"foldexp {name}: error: {exc}", file=sys.stderr)
                return 2
        removed = removed_group(argv) if name == "train" else None
        if removed is not None:  # before Hydra, whose own error is a traceback
            print(f"foldexp {name}: error: {removed}", file=sys.stderr)
            return 2
        app = importlib.import_module(module)
        if name == "train" and {"--help", "-h"} & set(argv):  # foldexp's own, no *_schema
            print(app.help_text())
            return 0
        refused = launcher_missing(argv)  # before Hydra writes the sweep folder's multirun.yaml
        if refused:
            print(f"foldexp {name}: error: {refused}", file=sys.stderr)
            return 2
        saved = sys.argv
        sys.argv = [f"foldexp {name}", *argv]  # Hydra reads its arguments from sys.argv
        try:
            with composing():
                try:
                    app.main()
                except (HydraException, OmegaConfBaseException) as exc:
                    if not still_composing() or os.environ.get("FOLDEXP_TRACEBACK"):
                        raise  # the run's own error, or a user who asked for tracebacks
                    print(f"foldexp {name}: error: {hydra_message(exc)}", file=sys.stderr)
                    return 2
                except RuntimeError as exc:  # a launcher that cannot start here
                    message = launcher_error(exc)
                    if message is None or os.environ.get("FOLDEXP_TRACEBACK"):
                        raise
                    print(f"foldexp {name}: error: {message}", file=sys.stderr)
                    return 2
                except OSError as exc:  # Hydra makes the run folder before the run starts
                    if not still_composing() or os.environ.get("FOLDEXP_TRACEBACK"):
                        raise
                    print(
                        f"foldexp {name}: error: cannot make the run folder {exc.filename} "
                        f"({exc.strerror or exc}); it is hydra.run.dir (hydra.sweep.dir with -m)",
                        file=sys.stderr,
                    )
                    return 2
        finally:
            sys.argv = saved
        return 0

    return run


def _report(argv: list[str]) -> int:
    from foldexp.analysis.report import run_report

    ap = argparse.ArgumentParser(prog="foldexp report", description=COMMANDS["report"])
    ap.add_argument(
        "dirs",
        nargs="+",
        help="run or sweep folders holding results.json files, or bench run folders "
        "(holding bench.csv: their plots are redrawn)",
    )
    ap.add_argument("--metric", help="column to sort and plot by (default: the test score of "
                    "the runs' select_metric, e.g. test_roc_auc)")  # fmt: skip
    order = ap.add_mutually_exclusive_group()  # default: the runs' select_mode for the metric
    order.add_argument("--ascending", action="store_const", const=True, help="smaller is better")
    order.add_argument("--descending", dest="ascending", action="store_const", const=False,
                       help="larger is better")  # fmt: skip
    ap.add_argument("--out", default=None, help="where to write (default: the first folder)")
    _trust_option(ap)
    a = ap.parse_args(argv)
    from foldexp.bench import CSV_NAME
    from foldexp.bench.plots import redraw

    bench_dirs = [d for d in a.dirs if (Path(d) / CSV_NAME).exists()]
    for d in bench_dirs:  # a bench run: redraw its plots from its CSV, without re-running
        for path in redraw(d):
            print(f"redrew {path}")
    train_dirs = [d for d in a.dirs if d not in bench_dirs]
    if train_dirs:
        with _trusting(a):
            run_report(train_dirs, a.metric, a.out, a.ascending)
    return 0


def _ensemble(argv: list[str]) -> int:
    from foldexp.analysis.ensemble import SPLITS, run_ensemble

    ap = argparse.ArgumentParser(prog="foldexp ensemble", description=COMMANDS["ensemble"])
    ap.add_argument("dirs", nargs="+", help="run or sweep folders (results.json, checkpoints/)")
    ap.add_argument("--split", default="test", choices=SPLITS, help="split to score (test)")
    ap.add_argument("--out", default=None, help="where to write (default: the first folder)")
    ap.add_argument("--batch-size", type=integer(1), default=256, help="trees per batch (256)")
    _allow_target_option(ap)
    a = ap.parse_args(argv)
    with _trusting(a):
        run_ensemble(a.dirs, a.split, a.out, a.batch_size, a.allow_target)
    return 0


def _trust_option(ap: argparse.ArgumentParser) -> None:
    ap.add_argument(
        "--trust-unverified",
        action="store_true",
        help="read a run folder's checkpoint, results.json or run_info.json that has no .sha256 "
        "sidecar or does not match it (refused otherwise): a run from before foldexp stored "
        "checksums, or a file you changed knowingly",
    )


def _trusting(a: argparse.Namespace) -> contextlib.AbstractContextManager[None]:
    from foldexp.train.artifacts import trust_unverified

    return trust_unverified(a.trust_unverified, "--trust-unverified")


def _allow_target_option(ap: argparse.ArgumentParser) -> None:
    _trust_option(ap)
    ap.add_argument(
        "--allow-target",
        action="append",
        default=[],
        metavar="TARGET",
        help="a _target_ outside foldexp's own registry that the run folder may name (e.g. your "
        "model class); run folders are untrusted, so anything else is refused",
    )


def _predict(argv: list[str], command: str = "predict") -> int:
    from foldexp.analysis.predict import stream_predict

    ap = argparse.ArgumentParser(prog=f"foldexp {command}", description=COMMANDS[command])
    ap.add_argument(
        "run_dir",
        help="a trained run's folder (run_info.json, checkpoints/best.pt); predict: or a sweep "
        "folder, whose runs predict as an ensemble (mean and <target>_std)",
    )
    ap.add_argument(
        "input",
        help="CSV/CSV.gz (comma, tab or semicolon) with the run's SMILES or text column, a PTB "
        "file, a file of one input a line (a row per line), or - for stdin",
    )
    ap.add_argument(
        "--output",
        "-o",
        default=None,
        help="CSV to write (default: stdout); fingerprint: or .npy/.npz (IDs in FILE.ids.csv)",
    )
    ap.add_argument("--column", default=None, help="input column (default: the run's)")
    ap.add_argument("--batch-size", type=integer(1), default=256, help="inputs per batch (256)")
    if command == "predict":  # foldexp.analysis.spread
        from foldexp.config import MAX_SEED

        ap.add_argument(
            "--mc-dropout",
            type=integer(2, 1000),
            default=0,
            metavar="N",
            help="N passes with dropout on: their mean and <target>_std",
        )
        ap.add_argument("--seed", type=integer(0, MAX_SEED), default=0, help="--mc-dropout's (0)")
    _allow_target_option(ap)
    a = ap.parse_args(argv)
    with _trusting(a):
        rows, failed = stream_predict(
            a.run_dir,
            a.input,
            a.output,
            column=a.column,
            batch_size=a.batch_size,
            allow_targets=a.allow_target,
            fingerprint=command == "fingerprint",
            mc_dropout=getattr(a, "mc_dropout", 0),
            seed=getattr(a, "seed", 0),
        )
    if a.output:
        print(f"wrote {a.output}: {rows} rows, {failed} with an error", file=sys.stderr)
    return 0


def _eval(argv: list[str]) -> int:
    import json

    from foldexp.analysis.evaluate_run import SPLITS, run_eval

    ap = argparse.ArgumentParser(prog="foldexp eval", description=COMMANDS["eval"])
    ap.add_argument("run_dir", help="a trained run's folder")
    ap.add_argument(
        "overrides", nargs="*", help="dataset.*/trainer.* overrides, e.g. dataset.path=new.csv"
    )
    ap.add_argument(
        "--split", default="test", choices=SPLITS, help="split to score, or all of them (test)"
    )
    ap.add_argument("--out", default=None, help="where to write (default: RUN_DIR/eval.json)")
    ap.add_argument(
        "--run-paths",
        action="store_true",
        help="read the files the run folder's config names (dataset.path, word_vectors, ...) "
        "that no override names: for a run of your own; by default a run folder names no files",
    )
    _allow_target_option(ap)
    a = ap.parse_args(argv)
    with _trusting(a):
        result = run_eval(a.run_dir, a.overrides, a.split, a.out, a.allow_target, a.run_paths)
    print(json.dumps(result, indent=2))
    return 0


def _data(argv: list[str]) -> int:
    from foldexp.experiments.data_stats import KINDS

    # ``--data-dir DIR`` may come first, as for the named datasets: kept, moved after the kind.
    lead: list[str] = []
    while argv and argv[0].startswith("--data-dir"):
        n = 1 if "=" in argv[0] else 2
        lead, argv = lead + argv[:n], argv[n:]
    if len(argv) >= 2 and argv[0] in ("stats", "import") and argv[1] in KINDS:
        return _own_data(argv + lead)
    argv = lead + argv
    from foldexp.data.cli import main as data_main

    return data_main(argv, KINDS)


def _own_data(argv: list[str]) -> int:
    """``foldexp data stats|import KIND key=value …``: files of one's own, read as training
    reads them (``foldexp.experiments.data_stats``)."""
    from foldexp.data.paths import resolve_data_dir
    from foldexp.experiments.data_stats import dataset_stats, import_files
    from foldexp.train.app import compose_dataset_config

    command, kind = argv[0], argv[1]
    ap = argparse.ArgumentParser(
        prog=f"foldexp data {command} {kind}",
        description=f"{command} a {kind} dataset of your own; the keys are the dataset config's "
        f"(foldexp train experiment={kind} --cfg job lists them), e.g. path=FILE",
    )
    ap.add_argument("overrides", nargs="+", help="dataset keys, e.g. path=FILE")
    ap.add_argument("--out", default="outputs/data-stats", help="stats: folder for KIND.png")
    ap.add_argument("--data-dir", default=None, help="import: the data folder (FOLDEXP_DATA)")
    a = ap.parse_args(argv[2:])
    cfg = compose_dataset_config(kind, a.overrides)
    if command == "stats":
        return dataset_stats(kind, cfg, a.out)
    return import_files(kind, cfg, a.overrides, resolve_data_dir(a.data_dir))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: foldexp COMMAND [ARGS...]\n\ncommands:")
        for name, text in COMMANDS.items():
            print(f"  {name:<8s} {text}")
        print("\n`foldexp COMMAND --help` for the options of one command.")
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    handlers = {
        "demo": _demo,
        "data": _data,
        "report": _report,
        "ensemble": _ensemble,
        "predict": _predict,
        "fingerprint": lambda rest: _predict(rest, "fingerprint"),
        "eval": _eval,
        "train": _hydra_app("train", "foldexp.train.app"),
        "bench": _hydra_app("bench", "foldexp.bench.app"),
    }
    if cmd not in handlers:
        print(f"foldexp: unknown command {cmd!r}; commands: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    from foldexp.logs import command_logging

    with command_logging():  # no handler a command sets up outlives it (foldexp/logs.py)
        if cmd in ("train", "bench"):  # Hydra apps report their own errors
            from foldexp.train.refused import no_sweep_folder_if_refused

            return no_sweep_folder_if_refused(lambda: handlers[cmd](rest))  # -m: no folder left
        from foldexp.train.app import report_errors

        return report_errors(cmd, lambda: handlers[cmd](rest))


if __name__ == "__main__":
    sys.exit(main())
