"""The block library: typed combinators for dynamic computation graphs.

``import foldexp.blocks as fb``. Names and meanings follow the Fold paper (Looks et al. 2017,
§3) and TensorFlow Fold's ``td`` module. A block is a typed function from an input to an output;
blocks compose into a model that ``foldexp.Compiler`` batches over inputs of any shape.

Types (``foldexp.types``):
    ``TensorType(shape, dtype)``  a tensor; ``shape`` excludes the batch dimension
    ``TupleType(*items)``         a fixed-length tuple
    ``SequenceType(item)``        a list of any length (nest them: sequences of sequences)
    ``BroadcastSequenceType(item)``  one value repeated endlessly (``Broadcast``)
    ``PyObjectType()``            a Python object: the paper's *Input*
    ``VoidType()``                no value

Inputs (Python objects → tensors):
    ``Scalar(dtype)``             a number → a scalar tensor
    ``Tensor(shape, dtype)``      a nested list or array → a tensor
    ``Vector(size, dtype)``       a list of numbers → a vector
    ``OneHot(start, stop)`` / ``OneHot(n)``  an integer → a one-hot vector
    ``OneHotFromList(elements)``  a listed value → a one-hot vector
    ``InputTransform(py_fn)``     a Python function on the Python input (e.g. ``str.split``)
    ``Optional(some_case)``       ``some_case`` on a value, zeros on ``None``
    ``Void()``                    discards its input

Composition:
    ``a >> b`` / ``Pipe(a, b)``   feeds ``a``'s output to ``b``
    ``Composition()``             a DAG: ``with c.scope():``, ``block.reads(...)``,
                                  ``c.input``, ``c.input[i]``, ``c.output.reads(...)``
    ``Record(fields)``            field ``k`` of the input to block ``k``; a dict, ``(key,
                                  block)`` pairs, or a tuple/list of blocks (plain dicts,
                                  tuples and lists convert to it)
    ``AllOf(*blocks)``            every block on the same input → a tuple
    ``Identity()``                its input
    ``GetItem(key)``              ``x[key]`` of a tuple, sequence or Python object

Tensors:
    ``Function(fn)``              a batched tensor function or ``nn.Module`` (tuples spread)
    ``FromTensor(tensor)``        a constant tensor
    ``Concat(concat_dim)``        concatenates a tuple of tensors
    ``Zeros(type)``               zeros of a tensor or tuple type (an empty list for sequences)

Sequences:
    ``Map(block)``                ``block`` on every element
    ``Fold(combine, start)``      a left fold: ``combine((state, x_i))`` from ``start``
    ``RNN(cell)``                 ``(y_i, state) = cell((x_i, state))`` → ``(ys, state)``
    ``Reduce(combine)``           a balanced binary reduction (depth ⌈log2 n⌉)
    ``Sum()``, ``Min()``, ``Max()``, ``Mean()``  elementwise reductions; zeros when empty
    ``Broadcast()``               its input, repeated as often as a zip needs
    ``Zip()``                     a tuple of sequences → a sequence of tuples
    ``ZipWith(block)``            ``Zip() >> Map(block)``
    ``NGrams(n)``                 the tuples of ``n`` consecutive elements
    ``Nth(n)`` / ``Nth()``        element ``n`` (or ``(sequence, n)`` → element ``n``)
    ``Length(dtype)``             the length, as a scalar tensor
    ``Slice(start, stop, step)``  ``x[start:stop:step]``

Control and recursion:
    ``OneOf(key_fn, case_blocks)``  dispatches on ``key_fn(input)``; cases agree on output type
    ``ForwardDeclaration()``      recursion: ``decl()`` makes a reference, ``decl.resolve_to``
                                  defines it once; its types are inferred
    ``Metric(name)``              records a tensor from anywhere into ``Compiler.last_metrics``
    ``While(cond, body, max_iterations, count=False)``  ``body`` while ``cond``: a loop of
                                  computed length, batched over its instances still running
    ``Unfold(step, max_length)``  ``step: T → (T, y, stop)`` until ``stop``: a sequence of
                                  computed length (plans built in stages)

Layers (``nn.Module``s sized from their input type; use in ``Function`` or directly in ``>>``):
    ``FC(num_units_out)``         a fully connected layer
    ``Embedding(num_buckets, num_units_out)`` / ``Embedding(initializer=matrix)``  a lookup
                                  table, optionally pretrained and frozen
    (recurrent and Tree-LSTM cells are in ``foldexp.models.cells``)

Every block has ``input_type`` / ``output_type`` (after typing), ``eval(x)`` to run one input
eagerly, and ``max_depth(x)``. ``foldexp.Compiler(block)`` batches it. Mistakes raise
``TypeError`` naming the block and the types when a model is composed or compiled; a bad Python
input raises ``InputError`` with its path inside the input.
"""

from foldexp.blocks._base import Block, InputError, Pipe, Wire, convert_to_block
from foldexp.blocks._composition import Composition
from foldexp.blocks._layers import FC, Embedding
from foldexp.blocks._loops import Unfold, While
from foldexp.blocks._metrics import Metric
from foldexp.blocks._onehot import OneHot, OneHotFromList
from foldexp.blocks._ops import Op
from foldexp.blocks._recursion import ForwardDeclaration
from foldexp.blocks._reductions import Max, Mean, Min, Sum
from foldexp.blocks._sequence_plumbing import Broadcast, Length, NGrams, Nth, Slice, Zip, ZipWith
from foldexp.blocks._sequences import RNN, Fold, Map, Reduce
from foldexp.blocks._structure import (
    AllOf,
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
    "Block", "InputError", "Pipe", "Wire", "convert_to_block", "Op",
    "TensorType", "TupleType", "SequenceType", "BroadcastSequenceType", "PyObjectType", "VoidType",
    "Scalar", "Tensor", "Vector", "OneHot", "OneHotFromList", "InputTransform", "Optional",
    "Void",
    "Composition", "Record", "AllOf", "Identity", "GetItem",
    "Function", "FromTensor", "Concat", "Zeros",
    "Map", "Fold", "RNN", "Reduce", "Sum", "Min", "Max", "Mean", "Broadcast", "Zip", "ZipWith",
    "NGrams", "Nth", "Length", "Slice",
    "OneOf", "ForwardDeclaration", "Metric", "While", "Unfold",
    "FC", "Embedding",
]  # fmt: skip
