"""Blocks that make tensors: from Python inputs (``Scalar``, ``Tensor``, ``Vector``), from
nothing (``Zeros``, ``FromTensor``) and from other tensors (``Function``, ``Concat``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from foldexp.blocks._base import Block, InputError, Tracer, tuple_item_types
from foldexp.blocks._captures import reached_modules, reached_state
from foldexp.blocks._ops import Op, structure_builder, structure_flattener
from foldexp.types import (
    BroadcastSequenceType,
    PyObjectType,
    SequenceType,
    TensorType,
    TupleType,
    Type,
    VoidType,
    as_dtype,
    is_tensor_tree,
)

__all__ = ["Scalar", "Tensor", "Vector", "Zeros", "FromTensor", "Function", "Concat"]

_NUMBER_TYPES = (int, float, bool, np.integer, np.floating, np.bool_)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def integer_range(dtype: torch.dtype) -> tuple[int, int] | None:
    """``(min, max)`` of an integer dtype; ``None`` for floating point and bool."""
    if dtype.is_floating_point or dtype.is_complex or dtype == torch.bool:
        return None
    info = torch.iinfo(dtype)
    return int(info.min), int(info.max)


class Scalar(Block):
    """A Python number → a scalar tensor of ``dtype``."""

    def __init__(self, dtype: str | torch.dtype = "float32", name: str | None = None) -> None:
        self.dtype = as_dtype(dtype)
        super().__init__(PyObjectType(), TensorType((), self.dtype), name)
        self._floating = self.dtype.is_floating_point
        self._range = integer_range(self.dtype)

    def _infer(self, input_type: Type) -> Type:
        return self._output_type  # type: ignore[return-value]

    def _trace(self, tr: Tracer, x: Any) -> Any:
        # The compiler's closure (``_closures._scalar``) skips the range check, to keep tracing
        # lean: the scheduler checks a whole batch's integers at once and, for a bad one, traces
        # the batch again through this method to name it (``Compiler.build``).
        if not isinstance(x, _NUMBER_TYPES) or (not self._floating and isinstance(x, float)):
            want = "a number" if self._floating else "an integer"
            raise InputError(self, f"expected {want}, got {x!r} ({type(x).__name__})")
        if self._range is not None and not self._range[0] <= x <= self._range[1]:
            low, high = self._range
            raise InputError(
                self,
                f"expected an integer in {_dtype_name(self.dtype)}'s range [{low}, {high}], "
                f"got {x!r}",
            )
        return tr.constant(self._output_type, x)

    def _repr_args(self) -> str:
        return f"'{_dtype_name(self.dtype)}'"


class Tensor(Block):
    """A nested list or array of ``shape`` → a tensor of that shape and ``dtype``."""

    def __init__(
        self,
        shape: tuple[int, ...] | list[int] | int,
        dtype: str | torch.dtype = "float32",
        name: str | None = None,
    ) -> None:
        ttype = TensorType(shape, dtype)
        super().__init__(PyObjectType(), ttype, name)
        self.shape, self.dtype = ttype.shape, ttype.dtype
        # on the CPU even inside ``with torch.device("meta")`` (a run's model sized without memory)
        self._np_dtype = torch.empty((), dtype=self.dtype, device="cpu").numpy().dtype

    def _infer(self, input_type: Type) -> Type:
        return self._output_type  # type: ignore[return-value]

    def _trace(self, tr: Tracer, x: Any) -> Any:
        try:
            arr = np.asarray(x, dtype=self._np_dtype)
        except (TypeError, ValueError) as e:
            raise InputError(
                self, f"expected an array of shape {self.shape}, got {x!r}: {e}"
            ) from None
        if arr.shape != self.shape:
            raise InputError(self, f"expected shape {self.shape}, got shape {arr.shape}")
        return tr.constant(self._output_type, arr)

    def _repr_args(self) -> str:
        return f"{list(self.shape)!r}, '{_dtype_name(self.dtype)}'"


class Vector(Tensor):
    """A list of ``size`` numbers → a 1-D tensor."""

    def __init__(
        self, size: int, dtype: str | torch.dtype = "float32", name: str | None = None
    ) -> None:
        super().__init__((size,), dtype, name)

    def _repr_args(self) -> str:
        return f"{self.shape[0]}, '{_dtype_name(self.dtype)}'"


def _as_type(t: Any) -> Type:
    """A type from what users write for one (TF Fold's conventions, where they do not clash).

    A ``Type`` stays; an int ``n`` is a float vector of ``n``; a dtype name is a scalar of that
    dtype; a tuple or list of ints is a float tensor of that shape, and a list ending in a dtype
    name (``[3, 4, 'int64']``) one of that dtype; a tuple holding types (or such tuples) is a
    ``TupleType`` — e.g. ``(state_size, state_size)`` with ``state_size`` an LSTM's ``(h, c)``.
    """
    if isinstance(t, Type):
        return t
    if isinstance(t, int) and not isinstance(t, bool):
        return TensorType((t,))
    if isinstance(t, str):
        return TensorType((), t)
    if isinstance(t, (list, tuple)) and all(isinstance(d, int) for d in t):
        return TensorType(tuple(t))
    if isinstance(t, list) and t and isinstance(t[-1], str):
        if all(isinstance(d, int) for d in t[:-1]):
            return TensorType(tuple(t[:-1]), t[-1])
    if isinstance(t, tuple) and any(isinstance(i, (Type, tuple)) for i in t):
        return TupleType(*[_as_type(i) for i in t])
    raise TypeError(f"expected a type or a tensor size, got {t!r}")


class Zeros(Block):
    """Zeros of ``output_type`` (a size, a ``TensorType`` or a tuple of them), whatever the input.

    A sequence type gives an empty list and ``VoidType`` gives ``None``, as in TF Fold.
    """

    def __init__(self, output_type: Any, name: str | None = None) -> None:
        t = _as_type(output_type)
        _check_zeroable(t)
        super().__init__(None, t, name)

    def _infer(self, input_type: Type) -> Type:
        return self._output_type  # type: ignore[return-value]

    def _trace(self, tr: Tracer, x: Any) -> Any:
        return _zeros_of(tr, self._output_type)

    def _repr_args(self) -> str:
        return repr(self._output_type)


def _check_zeroable(t: Type) -> None:
    if isinstance(t, TupleType):
        for i in t.items:
            _check_zeroable(i)
    elif isinstance(t, BroadcastSequenceType) or not isinstance(
        t, (TensorType, SequenceType, VoidType)
    ):
        raise TypeError(f"Zeros cannot make a value of type {t!r}")


def _zeros_of(tr: Tracer, t: Type) -> Any:
    if isinstance(t, TensorType):
        return tr.zeros(t)
    if isinstance(t, TupleType):
        return tuple(_zeros_of(tr, i) for i in t.items)
    if isinstance(t, SequenceType):
        return []
    if isinstance(t, VoidType):
        return None
    raise TypeError(f"Zeros cannot make a value of type {t!r}")


class FromTensor(Block):
    """A constant tensor (no batch dimension), the same for every input; not trained."""

    def __init__(self, tensor: Any, name: str | None = None) -> None:
        self.tensor = torch.as_tensor(tensor).detach()
        super().__init__(None, TensorType(tuple(self.tensor.shape), self.tensor.dtype), name)

    def _infer(self, input_type: Type) -> Type:
        return self._output_type  # type: ignore[return-value]

    def _trace(self, tr: Tracer, x: Any) -> Any:
        return tr.constant(self._output_type, self.tensor)

    def _repr_args(self) -> str:
        return f"<tensor {tuple(self.tensor.shape)}>"


def _type_of_output(out: Any, fn: Any) -> Type:
    if isinstance(out, torch.Tensor):
        if out.dim() == 0:
            raise TypeError(
                f"Function({fn!r}) returned a 0-d tensor; it must keep the batch dimension"
            )
        return TensorType(tuple(out.shape[1:]), out.dtype)
    if isinstance(out, (tuple, list)):
        return TupleType(*[_type_of_output(o, fn) for o in out])
    raise TypeError(f"Function({fn!r}) must return a tensor or a tuple of tensors, got {type(out)}")


def _dummy_inputs(t: Type, batch: int, device: torch.device) -> Any:
    if isinstance(t, TensorType):
        return torch.zeros((batch, *t.shape), dtype=t.dtype, device=device)
    return tuple(_dummy_inputs(i, batch, device) for i in t.items)  # type: ignore[attr-defined]


class OpBlock(Block):
    """A block that runs one ``Op`` on its (nested tuple of) tensor input."""

    op: Op | None = None

    def _bind(self, op: Op, input_type: Type, out: Type) -> Type:
        """Makes ``op`` this block's operation; precomputes the hot path's flatten/rebuild."""
        self.op = op
        self._flatten = structure_flattener(input_type)
        self._build = structure_builder(out)
        self._single = isinstance(out, TensorType)
        return out

    def _trace(self, tr: Tracer, x: Any) -> Any:
        out = tr.apply(self.op, self._flatten(x))  # type: ignore[arg-type]
        return out[0] if self._single else self._build(out)


class Function(OpBlock):
    """Applies ``fn`` — an ``nn.Module`` or any callable polymorphic in the batch dimension.

    On a tuple input the items are passed as separate positional arguments (so
    ``Function(torch.add)`` adds a pair); a tuple result gives a tuple output. The output type is
    inferred by calling ``fn`` once on a small batch of zeros unless ``output_type`` is given.
    The parameters of an ``nn.Module`` become parameters of the compiled model. A plain function
    that reaches a trainable module or tensor (closure, defaults, bound object, named globals;
    ``_captures.py``) is refused with ``TypeError``: the compiled model would not train it; pass
    the module itself, or an ``nn.Module`` whose forward calls it.

    The compiler computes equal invocations (same op, same argument values) once. Dropout
    modules inside ``fn`` are seen (``Op.is_random``); a ``fn`` that draws random numbers some
    other way (``F.dropout``, ``torch.rand``) must say so with ``random=True``.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        output_type: Type | None = None,
        input_type: Type | None = None,
        name: str | None = None,
        random: bool = False,
    ) -> None:
        if not callable(fn):
            raise TypeError(f"Function needs a callable or nn.Module, got {fn!r}")
        super().__init__(input_type, output_type, name)
        self.fn = fn
        self.random = random
        self.op: Op | None = None

    def _infer(self, input_type: Type) -> Type:
        if not is_tensor_tree(input_type):
            raise TypeError(
                f"{self!r} expects a tensor or a tuple of tensors as input, got {input_type!r}"
            )
        hidden = reached_state(self.fn, self.random)
        if hidden:
            raise TypeError(
                f"{self!r} reaches {'; '.join(hidden)}, which a compiled model would not see: "
                "its parameters would get no gradient and its dropout would not count as random. "
                "Give Function the module itself (Function(module)), or an nn.Module whose "
                "forward does what this function does; freeze what is meant to stay constant "
                "(requires_grad_(False))."
            )
        build = getattr(self.fn, "build_for_input_type", None)
        if build is not None:
            build(input_type, self)
        out = self._output_type
        if out is None:
            module = self.fn if isinstance(self.fn, torch.nn.Module) else None
            param = next(module.parameters(), None) if module is not None else None
            device = param.device if param is not None else torch.device("cpu")
            args = _dummy_inputs(input_type, 2, device)
            with torch.no_grad():
                try:
                    res = self.fn(*args) if isinstance(input_type, TupleType) else self.fn(args)
                except Exception as e:
                    raise TypeError(
                        f"{self!r} failed on a test batch of input type {input_type!r}: {e}"
                    ) from e
            out = _type_of_output(res, self.fn)
        module = self.fn if isinstance(self.fn, torch.nn.Module) else None
        name = self.name or _fn_name(self.fn)
        op = Op(self.fn, input_type, out, module, name, self.random, reached_modules(self.fn))
        return self._bind(op, input_type, out)

    def _repr_args(self) -> str:
        return _fn_name(self.fn)


def _fn_name(fn: Any) -> str:
    if isinstance(fn, torch.nn.Module):
        return type(fn).__name__
    return getattr(fn, "__name__", None) or getattr(fn, "__qualname__", None) or repr(fn)


class _Cat(torch.nn.Module):
    def __init__(self, dim: int, flatten: bool) -> None:
        super().__init__()
        self.dim, self.flatten = dim, flatten

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        if self.flatten:
            xs = tuple(x.reshape(x.shape[0], -1) for x in xs)
        return torch.cat(xs, dim=self.dim + 1)


class Concat(Function):
    """Concatenates a tuple of tensors along ``concat_dim`` (not counting the batch dimension).

    With ``flatten=True`` each tensor is first flattened to a vector.
    """

    def __init__(self, concat_dim: int = 0, flatten: bool = False, name: str | None = None):
        super().__init__(_Cat(concat_dim, flatten), name=name or "Concat")
        self.concat_dim, self.flatten = concat_dim, flatten

    def _infer(self, input_type: Type) -> Type:
        items = (
            tuple_item_types(self, input_type)
            if not isinstance(input_type, TensorType)
            else (input_type,)
        )
        if not all(isinstance(i, TensorType) for i in items):
            raise TypeError(f"{self!r} expects a flat tuple of tensors, got {input_type!r}")
        shapes = [(int(np.prod(i.shape)),) if self.flatten else i.shape for i in items]  # type: ignore[attr-defined]
        dtypes = {i.dtype for i in items}  # type: ignore[attr-defined]
        d = self.concat_dim
        if len(dtypes) > 1:
            raise TypeError(f"{self!r}: items have different dtypes {dtypes}")
        if any(len(s) <= d for s in shapes) or len({s[:d] + s[d + 1 :] for s in shapes}) > 1:
            raise TypeError(f"{self!r}: cannot concatenate shapes {shapes} along dimension {d}")
        out = list(shapes[0])
        out[d] = sum(s[d] for s in shapes)
        self._output_type = TensorType(tuple(out), dtypes.pop())
        if isinstance(input_type, TensorType):
            input_type = TupleType(input_type)
        return super()._infer(input_type)

    def _trace(self, tr: Tracer, x: Any) -> Any:
        return tr.apply(self.op, list(x) if isinstance(x, tuple) else [x])[0]  # type: ignore[arg-type]

    def _repr_args(self) -> str:
        return f"concat_dim={self.concat_dim}" + (", flatten=True" if self.flatten else "")
