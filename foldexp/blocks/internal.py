"""What the compiler and the executor use from the blocks' implementation — no stability promise.

``foldexp.blocks`` is the public surface for building models. The compiler (``foldexp.compiler``)
and the executor (``foldexp.executor``) also need a few pieces that a model author never touches:
how a block is traced into tensor operations, what an operation is, and how a pipe of operations
fuses into one. They import those from here, and only from here, so the dependency of the upper
layers on the blocks' internals is one explicit list instead of imports of underscored modules.

Like equinox's ``internal``, these names may change between versions without notice; code
outside foldexp should not rely on them.
"""

from __future__ import annotations

from foldexp.blocks._base import Block, InputError, Pipe, convert_to_block, iter_blocks
from foldexp.blocks._closures import Memo, closure_class, trace_fn
from foldexp.blocks._fusion import FusedOps, fused_blocks
from foldexp.blocks._loops import (
    PROBE_METRIC,
    STOP_METRIC,
    Unfold,
    UnfoldLengths,
    While,
    contains_unfold,
    loop_blocks,
    loop_cap_fraction,
)
from foldexp.blocks._ops import Op, structure_builder, structure_flattener
from foldexp.blocks._recursion import _ForwardRef as ForwardRef
from foldexp.blocks._steps import run_steps
from foldexp.blocks._tensors import OpBlock, Scalar, integer_range

__all__ = [
    # the block and its errors (also public in foldexp.blocks)
    "Block",
    "InputError",
    "Pipe",
    "convert_to_block",
    "iter_blocks",  # every block reachable from a root, once
    # tracing: a block over one input → the tensor operations it emits
    "trace_fn",  # the block tree as nested closures, traced once per block (the fast path)
    "closure_class",  # which closure of ``trace_fn`` traces a block (None: its own ``_trace``)
    "Memo",  # what one closure build shares (declarations' closures, fusion)
    "ForwardRef",  # a use of a ForwardDeclaration (recursion)
    "OpBlock",  # a block running one Op
    "Scalar",  # a number read from the input
    "run_steps",  # the same trace on an explicit stack, for trees too deep for Python's stack
    # operations: what the schedule groups and the executor calls in batch
    "Op",
    "structure_flattener",  # a structured value → its flat list of tensors
    "structure_builder",  # a flat list of tensors → the structured value
    "integer_range",  # the values an integer dtype holds (None for floats)
    # fusion: a run of operation blocks in a pipe becomes one operation
    "FusedOps",
    "fused_blocks",
    # loops of computed length (``_loops.py``): the staged compiler's side of ``Unfold``
    "UnfoldLengths",  # the lengths known so far, and what each input's trace recorded
    "contains_unfold",  # whether a root's plans are built in stages
    "PROBE_METRIC",  # internal metric: a probe's count
    "STOP_METRIC",  # internal metric prefix: an unrolled step's stop value
    "While",
    "Unfold",
    "loop_blocks",  # the While and Unfold blocks of a model, whose counts the compiler sums
    "loop_cap_fraction",  # (instances that hit max_iterations, instances) in a batch
]
