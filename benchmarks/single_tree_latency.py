"""Single-tree inference latency: one SST-sized tree (20 leaves, 39 nodes) through the engine
versus plain PyTorch evaluating the same modules node by node (a recursion over the tree), and
versus the blocks' own eager evaluator (``Block.eval``, the test oracle).

Usage: python benchmarks/single_tree_latency.py [--leaves 20] [--hidden 128] [--threads 1]
       [--rounds 40]

Dynamic batching batches within one tree too (all nodes at one depth run as one call), so even
at batch size 1 it should beat evaluating each node on its own, as in the Fold paper's Table 1.
Prints medians over rounds in which every case runs in turn, with the engine's trace+schedule
(build) and execution split, and the engine serving the same tree again from its plan cache
(``Compiler(cache_traces=True)`` keeps the plan of a batch built twice: a repeated request
costs no trace and no schedule).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch

import foldexp.blocks as fb
from foldexp import Compiler
from foldexp.bench.peer_torch import TreeLSTMParams
from foldexp.models.tree_lstm import random_tree


def interleaved_ms(
    cases: dict[str, Callable[[], object]], rounds: int, block: int = 10
) -> dict[str, float]:
    """Per case, the median over ``rounds`` of the mean of ``block`` calls in a row; every round
    runs every case in turn, so a machine that changes speed affects all of them alike."""
    for fn in cases.values():
        fn(), fn()  # warm-up (the plan cache keeps a batch built twice)
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, fn in cases.items():
            t0 = time.perf_counter()
            for _ in range(block):
                fn()
            times[name].append((time.perf_counter() - t0) / block)
    return {name: 1e3 * statistics.median(ts) for name, ts in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--leaves", type=int, default=20)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=40)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    tree = random_tree(args.leaves, 1000, np.random.default_rng(0))
    m = TreeLSTMParams(1000, args.hidden, args.hidden, 5)
    block = classifier_block(m)
    model = Compiler(block)
    cached = Compiler(block, cache_traces=True)

    def state(node: tuple) -> tuple[torch.Tensor, torch.Tensor]:
        if len(node) == 1:
            return m.word(torch.tensor([node[0]]))
        return m.cell(state(node[0]), state(node[1]))

    with torch.no_grad():
        torch.testing.assert_close(model([tree]), m.out(state(tree)[0]))
        plan = model.build([tree])
        ms = interleaved_ms(
            {
                "engine": lambda: model([tree]),
                "build": lambda: model.build([tree]),
                "run": lambda: model.run(plan),
                "served": lambda: cached([tree]),  # from the plan cache after the warm-up
                "plain": lambda: m.out(state(tree)[0]),
                "oracle": lambda: block.eval(tree),
            },
            args.rounds,
        )
        assert cached.plan_cache is not None and cached.plan_cache.hits > 0
    plain = ms["plain"]
    print(
        f"one tree, {plan.num_nodes} nodes, {plan.num_calls} calls, hidden {args.hidden}, "
        f"{args.threads} thread(s): engine {ms['engine']:.2f} ms (build {ms['build']:.2f}, run "
        f"{ms['run']:.2f}); node-by-node PyTorch {plain:.2f} ms (engine "
        f"{plain / ms['engine']:.2f}x faster); engine, plan cached {ms['served']:.2f} ms "
        f"({plain / ms['served']:.2f}x); Block.eval {ms['oracle']:.2f} ms"
    )


def classifier_block(m: TreeLSTMParams) -> fb.Block:
    """The Tree-LSTM classifier over ``m``'s modules, as the peers bench builds it."""
    tree = fb.ForwardDeclaration(name="tree")
    leaf = fb.GetItem(0) >> fb.Scalar("int64") >> fb.Function(m.embed) >> fb.Function(m.leaf)
    pair = fb.AllOf(fb.GetItem(0) >> tree(), fb.GetItem(1) >> tree()) >> fb.Function(m.cell)
    tree.resolve_to(fb.OneOf(key_fn=len, case_blocks=[(1, leaf), (2, pair)]))
    return tree() >> fb.GetItem(0) >> fb.Function(m.out)


if __name__ == "__main__":
    main()
