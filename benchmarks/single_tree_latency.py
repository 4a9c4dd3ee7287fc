"""Single-tree inference latency: one SST-sized tree (20 leaves, 39 nodes) through the engine
versus plain PyTorch evaluating the same modules node by node (a recursion over the tree), and
versus the blocks' own eager evaluator (``Block.eval``, the test oracle).

Usage: python benchmarks/single_tree_latency.py [--leaves 20] [--hidden 128] [--threads 1]

Dynamic batching batches within one tree too (all nodes at one depth run as one call), so even
at batch size 1 it should beat evaluating each node on its own, as in the Fold paper's Table 1.
Prints medians of many repeats, with the engine's trace+schedule (build) and execution split.
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


def median_ms(fn: Callable[[], object], repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--leaves", type=int, default=20)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=300)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    tree = random_tree(args.leaves, 1000, np.random.default_rng(0))
    m = TreeLSTMParams(1000, args.hidden, args.hidden, 5)
    block = classifier_block(m)
    model = Compiler(block)

    def state(node: tuple) -> tuple[torch.Tensor, torch.Tensor]:
        if len(node) == 1:
            return m.word(torch.tensor([node[0]]))
        return m.cell(state(node[0]), state(node[1]))

    with torch.no_grad():
        torch.testing.assert_close(model([tree]), m.out(state(tree)[0]))
        engine = median_ms(lambda: model([tree]), args.repeats)
        plan = model.build([tree])
        build = median_ms(lambda: model.build([tree]), args.repeats)
        run = median_ms(lambda: model.run(plan), args.repeats)
        plain = median_ms(lambda: m.out(state(tree)[0]), args.repeats)
        oracle = median_ms(lambda: block.eval(tree), args.repeats)
    print(
        f"one tree, {plan.num_nodes} nodes, {plan.num_calls} calls, hidden {args.hidden}, "
        f"{args.threads} thread(s): engine {engine:.2f} ms (build {build:.2f}, run {run:.2f}); "
        f"node-by-node PyTorch {plain:.2f} ms (engine {plain / engine:.2f}x faster); "
        f"Block.eval {oracle:.2f} ms"
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
