"""``Metric``: collects tensors from anywhere inside a structure into one named batch output.

A model's output has one row per input, but some quantities come per node: SST's Tree-LSTM has
a loss at every node of every tree. ``Metric(name)`` records its input each time it runs and
outputs nothing; after a batch, ``Compiler.last_metrics[name]`` holds ``(values, input_index)``:
every recorded value, in trace order, and the position in the batch of the input it came from.
Gradients flow from the metric values like from the outputs.
"""

from __future__ import annotations

from typing import Any

from foldexp.blocks._base import Block, Tracer
from foldexp.types import TensorType, Type, VoidType

__all__ = ["Metric"]


class Metric(Block):
    """Records its tensor input under ``metric_name``; outputs nothing (``VoidType``).

    A name that records no value in a batch is absent from ``Compiler.last_metrics``.
    """

    def __init__(self, metric_name: str) -> None:
        if not isinstance(metric_name, str) or not metric_name:
            raise TypeError(f"Metric needs a non-empty name, got {metric_name!r}")
        super().__init__(output_type=VoidType())
        self.metric_name = metric_name

    def _infer(self, input_type: Type) -> Type:
        if not isinstance(input_type, TensorType):
            raise TypeError(f"{self!r} expects a tensor as input, got {input_type!r}")
        return VoidType()

    def _trace(self, tr: Tracer, x: Any) -> Any:
        tr.metric(self.metric_name, x)
        return None

    def _repr_args(self) -> str:
        return repr(self.metric_name)
