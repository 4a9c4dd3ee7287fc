"""Eager, one-input evaluation of a block: the oracle for the batching engine.

Every operation runs the moment a block asks for it, on a batch of one, with no tracing,
scheduling or batching. ``Block.eval`` and ``Block.max_depth`` use it; tests compare the
compiled, batched engine against it, values and gradients. Blocks are walked by ``run_steps``
(``_steps.py``), with an explicit stack, so inputs of any depth evaluate.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import torch

from foldexp.blocks._base import Block, iter_blocks
from foldexp.blocks._ops import Op
from foldexp.blocks._sequences import Repeat
from foldexp.blocks._steps import run_steps
from foldexp.types import PyObjectType, TensorType, Type

__all__ = [
    "EagerTracer",
    "block_device",
    "eval_block",
    "eval_with_metrics",
    "depth_of",
    "unbatch",
]


def payload_tensor(ttype: TensorType, payload: Any) -> torch.Tensor:
    """One constant as a tensor of ``ttype`` (no batch dimension)."""
    if isinstance(payload, torch.Tensor):
        t = payload.to(ttype.dtype)
    else:
        t = torch.as_tensor(np.asarray(payload), dtype=ttype.dtype)
    return t.reshape(ttype.shape)


class EagerTracer:
    """Runs operations immediately; tensor values are tensors with a batch dimension of one."""

    def __init__(self, device: torch.device | str | None = None) -> None:
        self.device = torch.device(device) if device is not None else None
        self.metrics: dict[str, list[torch.Tensor]] = {}
        self.depth: dict[int, int] = {}  # id(tensor) → depth, for max_depth
        self.max_depth = 0
        self._alive: list[torch.Tensor] = []

    def constant(self, ttype: TensorType, payload: Any) -> torch.Tensor:
        t = payload_tensor(ttype, payload).unsqueeze(0)
        return t.to(self.device) if self.device is not None else t

    def zeros(self, ttype: TensorType) -> torch.Tensor:
        return torch.zeros((1, *ttype.shape), dtype=ttype.dtype, device=self.device)

    def apply(self, op: Op, args: list[Any]) -> list[Any]:
        if op.id_limit is not None and not args[0].is_meta:  # a meta tensor holds no ids
            op.check_ids(args[0])  # before torch's own IndexError, which names no input
        d = 1 + max((self.depth.get(id(a), 0) for a in args), default=0)
        outs = op.forward(args)
        for o in outs:
            self.depth[id(o)] = d
        self._alive.extend(outs)  # keeps every output alive so that no id() is reused
        self.max_depth = max(self.max_depth, d)
        return outs

    def metric(self, name: str, value: Any) -> None:
        self.metrics.setdefault(name, []).append(value)


def unbatch(value: Any) -> Any:
    """Drops the batch dimension of one from every tensor inside ``value``."""
    if isinstance(value, torch.Tensor):
        return value[0]
    if isinstance(value, tuple):
        return tuple(unbatch(v) for v in value)
    if isinstance(value, list):
        return [unbatch(v) for v in value]
    if isinstance(value, Repeat):
        return itertools.repeat(unbatch(value.value))
    return value


def _typed(block: Block, input_type: Type | None) -> None:
    block.infer(
        input_type
        if input_type is not None
        else (block.input_type or block._declared_input or PyObjectType())
    )


def block_device(block: Block) -> torch.device | None:
    """Where the first module reachable from (typed) ``block`` that holds a parameter or a
    buffer keeps it: the device the eager oracle must make its constants on, as the compiler
    runs where the parameters are. ``None`` for a block without any."""
    for b in iter_blocks(block):
        op = getattr(b, "op", None)
        module = op.module if isinstance(op, Op) else None
        if module is not None:
            for t in itertools.chain(module.parameters(), module.buffers()):
                return t.device
    return None


def _tracer(block: Block, input_type: Type | None, device: Any) -> EagerTracer:
    _typed(block, input_type)
    return EagerTracer(device if device is not None else block_device(block))


def eval_block(block: Block, x: Any, input_type: Type | None = None, device: Any = None) -> Any:
    """Evaluates ``block`` on one input eagerly; tensors come back without a batch dimension.
    Constants are made on ``device``, by default where the block's parameters are."""
    return unbatch(run_steps(block, _tracer(block, input_type, device), x))


def eval_with_metrics(
    block: Block, x: Any, input_type: Type | None = None, device: Any = None
) -> tuple[Any, dict[str, list[torch.Tensor]]]:
    """Like ``eval_block``, also returning the ``Metric`` values recorded, name → list (in
    the order they were recorded, each without a batch dimension)."""
    tr = _tracer(block, input_type, device)
    out = unbatch(run_steps(block, tr, x))
    return out, {name: [v[0] for v in vals] for name, vals in tr.metrics.items()}


def depth_of(block: Block, x: Any, input_type: Type | None = None) -> int:
    """The depth of the deepest operation ``block`` performs on ``x`` (constants are depth 0)."""
    tr = _tracer(block, input_type, None)
    with torch.no_grad():
        run_steps(block, tr, x)
    return tr.max_depth
