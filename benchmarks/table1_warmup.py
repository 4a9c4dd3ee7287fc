"""How many steps Table 1's training cases need before their times are steady.

Usage: python benchmarks/table1_warmup.py [--batch 256 --state 256 --rounds 6 --threads 2]
       [--no-keep-memory]

Runs the three Table 1 training cases of ``foldexp bench`` (``foldexp.bench.table1``: manual
level batching on identical-shape trees, the engine on the same trees, the engine on random
trees) round-robin with a rotating start, as ``foldexp.bench.timing.run_interleaved`` does, with
no warm-up, and prints each step's timed seconds (schedule building apart, as in the bench) and
the minor page faults the whole step took (``getrusage``). The first rounds
page-fault while glibc's heap grows to the pattern of all three cases; after that the faults
stop and the times settle. This is the measurement behind the interleaved warm-up rounds and the
quick preset's ``warmup: 3`` at full batch size.
"""

from __future__ import annotations

import argparse
import resource
from types import SimpleNamespace

import torch

from foldexp import Compiler
from foldexp.bench.table1 import table1_cases
from foldexp.bench.table1_model import PaperTreeModel
from foldexp.bench.timing import Env, Stopwatch, round_order
from foldexp.kernels.memory import keep_freed_memory


def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--state", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-keep-memory", action="store_true", help="glibc's default heap")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if not args.no_keep_memory:
        keep_freed_memory()
    # Table 1's own cases (foldexp.bench.table1), at 128 leaves over a 128-word vocabulary.
    bench = SimpleNamespace(leaves=128, vocab_size=128, manual="level")
    env = Env(torch.device("cpu"), args.threads)
    torch.manual_seed(0)
    model = PaperTreeModel(bench.vocab_size, args.state)
    compiler = Compiler(model.block(), merge_duplicates=False)
    cases = table1_cases(model, compiler, bench, env, args.batch, True, args.batch)
    print(f"round  {'case':<13} seconds  page faults   (seconds: the case's own column)")
    for r in range(args.rounds):
        for case in round_order(cases, r):
            sw = Stopwatch(env.device)
            f0 = _faults()
            case.step(sw)
            faults = _faults() - f0
            print(f"{r:>5}  {case.name:<13} {sw.times[case.name]:7.3f}  {faults:>11,}")


if __name__ == "__main__":
    main()
