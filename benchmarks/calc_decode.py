"""The calc_decode model's throughput: training steps and greedy decoding, in sequences per second,
beside the same model decoding one expression at a time.

Usage: python benchmarks/calc_decode.py [--batch 256] [--hidden 64] [--repeats 3] [--single 64]

Calculator expressions of the default experiment's dataset (depth 3). ``train`` is a
teacher-forced step (forward, backward) over ``--batch`` expressions; ``greedy`` decodes them
with ``fb.Unfold``, batched over the expressions still decoding (the plan built in stages:
probes, then the batch with every length); ``one at a time`` decodes ``--single`` of them, each
its own batch of one. Best (median) of ``--repeats`` rounds, the methods in turn each round.
The weights are untrained unless ``--train-steps`` trains them first (an untrained decoder
emits ``max_length`` tokens: set ``--max-length`` to the targets' longest to compare fairly).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from foldexp.experiments.datasets import calculator
from foldexp.models.calc_decode import CalcDecoder


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--single", type=int, default=64, help="expressions decoded one at a time")
    ap.add_argument("--train-steps", type=int, default=60)
    ap.add_argument("--max-length", type=int, default=24)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    bundle = calculator(n=4000, max_depth=3, n_classes=10, leaf_prob=0.3, seed=0)
    model = CalcDecoder(bundle.info["vocab"], args.hidden, args.hidden, max_length=args.max_length)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    train = bundle.train
    for step in range(args.train_steps):  # so that decoding stops where a trained one does
        chunk = [train[(step * 32 + k) % len(train)] for k in range(32)]
        opt.zero_grad()
        model(model.collate(chunk))["loss"].backward()
        opt.step()
    trees = train[: args.batch]
    single = trees[: args.single]

    def train_step() -> None:
        model.train()
        model.zero_grad()
        model(model.collate(trees))["loss"].backward()

    def greedy() -> None:
        model.eval()
        with torch.no_grad():
            model.decode(model.collate(trees))

    def one_at_a_time() -> None:
        model.eval()
        with torch.no_grad():
            for t in single:
                model.decode(model.collate([t]))

    cases = {"train": (train_step, len(trees)), "greedy": (greedy, len(trees)),
             "one at a time": (one_at_a_time, len(single))}  # fmt: skip
    times: dict[str, list[float]] = {k: [] for k in cases}
    for r in range(args.repeats + 1):
        for name, (fn, _) in cases.items():
            t0 = time.perf_counter()
            fn()
            if r:
                times[name].append(time.perf_counter() - t0)
    tokens = sum(len(d) for d in model.decode(model.collate(trees)))
    print(
        f"batch {args.batch}, hidden {args.hidden}, threads {args.threads}, "
        f"{args.train_steps} training steps first; greedy emits {tokens / len(trees):.1f} "
        "tokens per expression"
    )
    print("| case | sequences/s, best (median) |\n|---|---|")
    for name, (_, n) in cases.items():
        best, med = min(times[name]), statistics.median(times[name])
        print(f"| {name} | {n / best:,.0f} ({n / med:,.0f}) |")
    batched = len(trees) / min(times["greedy"])
    ratio = batched / (len(single) / min(times["one at a time"]))
    print(f"greedy batched over one at a time: {ratio:.1f}×")


if __name__ == "__main__":
    main()
