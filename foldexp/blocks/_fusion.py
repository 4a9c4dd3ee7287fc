"""Op fusion: a run of operation blocks in a ``Pipe`` becomes one operation.

In ``Scalar >> Function(embedding) >> Function(leaf_cell)`` the embedding's output goes nowhere
but into the leaf cell, so there is no reason to batch the two apart: as one op, the engine
records one invocation per leaf instead of two, launches one call instead of two, and never
writes the embeddings into a buffer (nor their gradient into a gradient buffer). The compiler
fuses every run of two or more *plain* op blocks (``Function``, ``FC``, ``Embedding``, … whose
class traces the way ``OpBlock`` does) in every ``Pipe`` it compiles, unless it is built with
``Compiler(..., fuse_ops=False)``.

Fusion changes the reported depths and call counts (a fused run counts once), not the results:
the eager oracle runs the blocks one by one, and the batched == eager checks compare the two.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from foldexp.blocks._base import Block, Pipe
from foldexp.blocks._ops import Op
from foldexp.blocks._tensors import OpBlock

__all__ = ["FusedOp", "fused_blocks"]


class FusedOp(Op):
    """Several ops applied one after the other, as one op."""

    def __init__(self, parts: Sequence[Op]) -> None:
        self.parts = list(parts)
        super().__init__(
            None,  # type: ignore[arg-type]  # forward is overridden
            parts[0].input_type,
            parts[-1].output_type,
            None,
            " >> ".join(op.name for op in parts),
        )
        self.id_limit, self.id_table = parts[0].id_limit, parts[0].id_table  # ids come in first

    def forward(self, args: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        for op in self.parts:
            args = op.forward(args)
        return list(args)

    def is_random(self) -> bool:
        return any(op.is_random() for op in self.parts)

    def has_forward_hooks(self) -> bool:
        for op in self.parts:  # a loop, not any(): a kept plan asks at every run
            if op.has_forward_hooks():
                return True
        return False

    def parameters(self) -> list[torch.nn.Parameter]:
        seen: set[int] = set()
        params = []
        for op in self.parts:
            for p in op.parameters():
                if id(p) not in seen:
                    seen.add(id(p))
                    params.append(p)
        return params


class FusedOps(OpBlock):
    """The blocks of a fused run, traced as one op (built by ``fused_blocks``)."""

    def __init__(self, parts: Sequence[OpBlock]) -> None:
        first, last = parts[0], parts[-1]
        super().__init__(first.input_type, last.output_type)
        self.parts = list(parts)
        self._bind(FusedOp([b.op for b in parts]), first.input_type, last.output_type)  # type: ignore[misc]
        self._inferred = True

    def _repr_args(self) -> str:
        return " >> ".join(map(repr, self.parts))


def _plain(block: Block) -> bool:
    return (
        isinstance(block, OpBlock)
        and type(block)._trace is OpBlock._trace
        and getattr(block, "op", None) is not None
    )


def fused_blocks(pipe: Pipe) -> list[Block]:
    """``pipe``'s blocks with every run of two or more plain op blocks as one ``FusedOps``.

    Computed once per (typed) pipe and kept on it, so every compiler of the pipe shares the
    fused ops.
    """
    cached: Any = pipe.__dict__.get("_fused_blocks")
    if cached is not None:
        return cached
    out: list[Block] = []
    run: list[OpBlock] = []
    for b in [*pipe.blocks, None]:
        if b is not None and _plain(b):
            run.append(b)  # type: ignore[arg-type]
            continue
        out.extend([FusedOps(run)] if len(run) > 1 else run)
        run = []
        if b is not None:
            out.append(b)
    pipe.__dict__["_fused_blocks"] = out
    return out
