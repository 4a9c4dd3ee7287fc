"""The block library: typed combinators for dynamic computation graphs.

``import foldexp.blocks as fb``. Names and meanings follow the Fold paper (Looks et al. 2017,
§3) and TensorFlow Fold's ``td`` module.

Types:
    ``TensorType``, ``TupleType``, ``SequenceType``, ``BroadcastSequenceType``, ``PyObjectType``,
    ``VoidType``

Inputs (Python objects → tensors):
    ``Scalar``, ``Tensor``, ``Vector``, ``InputTransform``, ``Optional``, ``Void``

Composition:
    ``>>`` / ``Pipe``, ``Record`` (dicts, tuples and lists convert to it), ``AllOf``,
    ``Identity``, ``GetItem``

Tensors:
    ``Function``, ``Concat``, ``Zeros``, ``FromTensor``

Sequences:
    ``Map``, ``Fold``, ``Reduce``

Control and recursion:
    ``OneOf``, ``ForwardDeclaration``

Layers (``nn.Module``s sized from their input type; use in ``Function`` or directly in ``>>``):
    ``FC``, ``Embedding``

Every block has ``input_type`` / ``output_type`` (after typing), ``eval(x)`` to run one input
eagerly, and ``max_depth(x)``. ``foldexp.Compiler(block)`` batches it.
"""

from foldexp.blocks._base import Block, InputError, Pipe, convert_to_block
from foldexp.blocks._layers import FC, Embedding
from foldexp.blocks._ops import Op
from foldexp.blocks._sequences import Fold, Map, Reduce
from foldexp.blocks._structure import (
    AllOf,
    ForwardDeclaration,
    GetItem,
    Identity,
    InputTransform,
    OneOf,
    Optional,
    Record,
    Void,
)
from foldexp.blocks._tensors import Concat, FromTensor, Function, Scalar, Tensor, Vector, Zeros
from foldexp.types import (
    BroadcastSequenceType,
    PyObjectType,
    SequenceType,
    TensorType,
    TupleType,
    VoidType,
)

__all__ = [
    "Block", "InputError", "Pipe", "convert_to_block", "Op",
    "TensorType", "TupleType", "SequenceType", "BroadcastSequenceType", "PyObjectType", "VoidType",
    "Scalar", "Tensor", "Vector", "InputTransform", "Optional", "Void",
    "Record", "AllOf", "Identity", "GetItem",
    "Function", "Concat", "Zeros", "FromTensor",
    "Map", "Fold", "Reduce",
    "OneOf", "ForwardDeclaration",
    "FC", "Embedding",
]  # fmt: skip
