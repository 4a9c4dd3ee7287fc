"""How many steps Table 1's training cases need before their times are steady.

Usage: python benchmarks/table1_warmup.py [--batch 256 --state 256 --rounds 6 --threads 2]
       [--no-keep-memory]

Runs the three Table 1 training cases of ``foldexp bench`` (manual level batching on
identical-shape trees, the engine on the same trees, the engine on random trees) round-robin
with a rotating start, as ``foldexp.bench.timing.run_interleaved`` does, with no warm-up, and
prints each step's seconds and the minor page faults it took (``getrusage``). The first rounds
page-fault while glibc's heap grows to the pattern of all three cases; after that the faults
stop and the times settle. This is the measurement behind the interleaved warm-up rounds and the
quick preset's ``warmup: 3`` at full batch size.
"""

from __future__ import annotations

import argparse
import resource
import time
from collections.abc import Callable

import numpy as np
import torch

from foldexp import Compiler
from foldexp.bench.models import PaperTreeModel, leaf_words
from foldexp.bench.trees import levels_of, make_tree, make_trees, same_shape_trees
from foldexp.kernels.memory import keep_freed_memory


def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _cases(batch: int, state: int, leaves: int = 128) -> list[tuple[str, Callable[[], None]]]:
    torch.manual_seed(0)
    model = PaperTreeModel(leaves, state)
    compiler = Compiler(model.block(), merge_duplicates=False)
    rng = np.random.default_rng(batch)
    template = make_tree(leaves, leaves, rng, "random")
    levels = levels_of(template)
    same = same_shape_trees(template, batch, leaves, batch + 1)
    words = leaf_words(same)
    full = make_trees(batch, leaves, leaves, batch + 2)

    def manual() -> None:
        model.zero_grad(set_to_none=True)
        (0.5 * model.manual_level(levels, words).pow(2).sum()).backward()

    def engine(trees: list) -> Callable[[], None]:
        plan = compiler.build(trees)

        def step() -> None:
            model.zero_grad(set_to_none=True)
            (0.5 * compiler.run(plan).pow(2).sum()).backward()

        return step

    return [("manual", manual), ("dynamic", engine(same)), ("full_dynamic", engine(full))]


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
    cases = _cases(args.batch, args.state)
    print(f"round  {'case':<13} seconds  page faults")
    for r in range(args.rounds):
        k = r % len(cases)
        for name, step in cases[k:] + cases[:k]:
            f0, t0 = _faults(), time.perf_counter()
            step()
            print(f"{r:>5}  {name:<13} {time.perf_counter() - t0:7.3f}  {_faults() - f0:>11,}")


if __name__ == "__main__":
    main()
