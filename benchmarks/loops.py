"""Loops of computed length: ``fb.While`` batched by the engine, against masking and per input.

Usage: python benchmarks/loops.py [--batch 256] [--hidden 128] [--longest 50] [--repeats 11]
       [--device cpu|cuda] [--backward]

Each instance of a batch refines a hidden state ``h <- tanh(W h + b)`` while its budget lasts
(the budget counts down; the condition reads it, so the loop's length is a computed value).
The lengths are skewed: most instances stop after 2–3 iterations and a few after ``--longest``.
Two skews with the same longest (5% and 25% long) show whether time follows the total
iterations or batch × longest. Side by side, on the same weights, in one process:

- ``batched``: ``Compiler(fb.Record([fb.Vector(H), fb.Scalar()]) >> fb.While(...))``; each
  iteration is one call of the body over the instances still running (trace and schedule
  of the 256 Python inputs included at every call, as a user pays them for new inputs);
- ``cached``: the same with ``cache_traces=True``, the batch seen before (an evaluation split,
  a repeated request): its plan is reused, no trace and no schedule, the loop still runs;
- ``masked``: what ``vmap(while_loop)`` does — every instance steps until the longest is done,
  finished rows kept by ``torch.where``;
- ``per-input``: a Python ``while`` per instance, batch of one.

The methods run in turn, round after round (a warm-up round first), so that load from other
processes falls on all alike; reports per batch the median (best) milliseconds over
``--repeats`` rounds, the speed-ups of the medians, and checks that all agree; and the load
average before and after. With
``--backward`` each run includes the gradient of the states' sum into the weights.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

import foldexp.blocks as fb
from foldexp import Compiler


class Body(torch.nn.Module):
    """One iteration: ``(h, budget) -> (tanh(W h + b), budget - 1)``."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(hidden, hidden)

    def forward(self, h: torch.Tensor, budget: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.tanh(self.lin(h)), budget - 1.0


def lengths(batch: int, long_share: float, longest: int, rng: np.random.Generator) -> list[int]:
    """Most instances 2 or 3 iterations, ``long_share`` of them ``longest``."""
    n_long = round(batch * long_share)
    out = [longest] * n_long + [int(rng.integers(2, 4)) for _ in range(batch - n_long)]
    rng.shuffle(out)
    return out


def masked(body: Body, h: torch.Tensor, budget: torch.Tensor) -> torch.Tensor:
    """Every row steps until none is active; finished rows keep their state."""
    active = budget > 0
    while bool(active.any()):
        new_h, new_b = body(h, budget)
        h = torch.where(active.unsqueeze(1), new_h, h)
        budget = torch.where(active, new_b, budget)
        active = budget > 0
    return h


def per_input(body: Body, h: torch.Tensor, budget: torch.Tensor) -> torch.Tensor:
    rows = []
    for k in range(h.shape[0]):
        x, b = h[k : k + 1], budget[k : k + 1]
        while bool(b[0] > 0):
            x, b = body(x, b)
        rows.append(x)
    return torch.cat(rows)


def run_once(fn: Callable[[], torch.Tensor], backward: bool, device: str) -> tuple:
    """Milliseconds of one run (and its output)."""
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.enable_grad() if backward else torch.no_grad():
        out = fn()
        if backward:
            out.sum().backward()
    if device == "cuda":
        torch.cuda.synchronize()
    return 1000 * (time.perf_counter() - t0), out.detach()


def interleaved(fns: dict[str, Callable[[], torch.Tensor]], repeats: int, args: Any) -> dict:
    """Each method once per round, round after round (a warm-up round first), so that load from
    other processes falls on all of them alike; per method: (min, median, output)."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    outs = {}
    for r in range(repeats + 1):
        for name, fn in fns.items():
            ms, outs[name] = run_once(fn, args.backward, args.device)
            if r:
                times[name].append(ms)
    return {k: (min(v), statistics.median(v), outs[k]) for k, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--longest", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=11)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--backward", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    body = Body(args.hidden)
    loop = fb.While(fb.GetItem(1), fb.Function(body), max_iterations=args.longest + 1)
    model = Compiler(fb.Record([fb.Vector(args.hidden), fb.Scalar()]) >> loop >> fb.GetItem(0))
    cached = Compiler(model.root, cache_traces=True)
    model.to(args.device)
    cached.to(args.device)
    h0 = torch.randn(args.batch, args.hidden)
    mode = "forward+backward" if args.backward else "forward"
    print(
        f"batch {args.batch}, hidden {args.hidden}, longest {args.longest}, device "
        f"{args.device}, threads {args.threads}, {mode}, {args.repeats} rounds, load average "
        f"{os.getloadavg()[0]:.2f}"
    )
    print(
        "| skew | iterations (total / batch×longest) | batched ms, median (best) | cached ms "
        "| masked ms | per-input ms | batched vs masked / per-input "
        "| cached vs masked / per-input |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for share in (0.05, 0.25):
        lens = lengths(args.batch, share, args.longest, rng)
        inputs = [(h0[k].tolist(), float(lens[k])) for k in range(args.batch)]
        h = h0.to(args.device)
        budget = torch.tensor(lens, dtype=torch.float32, device=args.device)
        res = interleaved(
            {
                "batched": lambda inputs=inputs: model(inputs),
                "cached": lambda inputs=inputs: cached(inputs),
                "masked": lambda h=h, budget=budget: masked(body, h, budget),
                "per-input": lambda h=h, budget=budget: per_input(body, h, budget),
            },
            args.repeats,
            args,
        )
        ref = res["masked"][2]
        for name in ("batched", "cached", "per-input"):
            torch.testing.assert_close(res[name][2], ref, rtol=1e-4, atol=1e-5)
        cell = {k: f"{med:.2f} ({lo:.2f})" for k, (lo, med, _) in res.items()}
        med = {k: v[1] for k, v in res.items()}
        vs = {
            k: f"{med['masked'] / med[k]:.1f}× / {med['per-input'] / med[k]:.1f}×"
            for k in ("batched", "cached")
        }
        print(
            f"| {int(share * 100)}% at {args.longest}, rest 2–3 | {sum(lens)} / "
            f"{args.batch * args.longest} | {cell['batched']} | {cell['cached']} | "
            f"{cell['masked']} | {cell['per-input']} | {vs['batched']} | {vs['cached']} |"
        )
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
