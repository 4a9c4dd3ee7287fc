"""Reductions of a sequence to one value: ``Sum``, ``Min``, ``Max`` and ``Mean``.

Each is a balanced ``Reduce`` over one pairwise operation (depth ⌈log2 n⌉ for n elements, so
long sequences do not make deep, narrow schedules), giving zeros on an empty sequence, as in TF
Fold. The pairwise operations hold no parameters, so one ``Op`` per (operation, type) is shared
by every block in every model: all the sums of one tensor type at one depth — of any sequence,
in any block — run as one batched call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from foldexp.blocks._base import Block, Tracer
from foldexp.blocks._ops import Op
from foldexp.blocks._sequences import Reduce, as_list, element_type
from foldexp.blocks._tensors import OpBlock, Zeros
from foldexp.types import TensorType, TupleType, Type, is_tensor_tree

__all__ = ["Sum", "Min", "Max", "Mean", "SharedOp", "shared_op"]

_SHARED: dict[tuple[str, Type], Op] = {}


def shared_op(kind: str, fn: Callable[..., Any], input_type: Type, output_type: Type) -> Op:
    """The one parameter-free ``Op`` of ``kind`` for ``input_type`` (made on first use)."""
    key = (kind, input_type)
    op = _SHARED.get(key)
    if op is None:
        op = _SHARED[key] = Op(fn, input_type, output_type, None, kind)
    return op


class SharedOp(OpBlock):
    """A parameter-free tensor function whose op is shared by all blocks of ``kind`` and type.

    Args:
        kind: names the function; blocks of one kind must compute the same thing.
        fn: the batched function, called like ``Function`` calls its ``fn``.
        output_of: ``(block, input_type) -> output_type``; raises ``TypeError`` for inputs the
            function does not take.
    """

    def __init__(
        self,
        kind: str,
        fn: Callable[..., Any],
        output_of: Callable[[Block, Type], Type],
        name: str | None = None,
    ) -> None:
        super().__init__(name=name)
        self.kind, self.fn, self._output_of = kind, fn, output_of
        self.op: Op | None = None

    def _infer(self, input_type: Type) -> Type:
        out = self._output_of(self, input_type)
        return self._bind(shared_op(self.kind, self.fn, input_type, out), input_type, out)

    def _repr_args(self) -> str:
        return repr(self.kind)


def _elementwise(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Callable:
    """``fn`` lifted to pairs of equal (nested) tuples of tensors."""

    def pairwise(a: Any, b: Any) -> Any:
        if isinstance(a, torch.Tensor):
            return fn(a, b)
        return tuple(pairwise(x, y) for x, y in zip(a, b))

    return pairwise


def _same_pair(block: Block, t: Type) -> Type:
    if isinstance(t, TupleType) and len(t) == 2 and t[0] == t[1] and is_tensor_tree(t[0]):
        return t[0]
    raise TypeError(f"{block!r} expects a pair of equal tensor types, got {t!r}")


class _Reduction(Reduce):
    """A ``Reduce`` over a shared pairwise op; zeros on an empty sequence."""

    _kind = ""
    _fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = torch.add

    def __init__(self, name: str | None = None) -> None:
        super().__init__(SharedOp(self._kind, _elementwise(type(self)._fn), _same_pair), name=name)
        self._tensor_item = False

    def _infer(self, input_type: Type) -> Type:
        item = element_type(self, input_type, finite=True, what="a sequence of tensors")
        if not is_tensor_tree(item):
            raise TypeError(
                f"{self!r} expects a sequence of tensors (or of tuples of tensors), "
                f"got {input_type!r}"
            )
        self.default_block = Zeros(item)
        out = super()._infer(input_type)
        self._item = item
        self._tensor_item = isinstance(item, TensorType)
        return out

    def _trace(self, tr: Tracer, x: Any) -> Any:
        if not self._tensor_item:
            return super()._trace(tr, x)
        # The common case inlined (the hot path): a balanced tree of pairwise calls.
        items = x if isinstance(x, list) else as_list(self, x)
        if not items:
            return tr.zeros(self._item)
        op, apply = self.combine_block.op, tr.apply  # type: ignore[attr-defined]
        while len(items) > 1:
            nxt = [apply(op, [items[i], items[i + 1]])[0] for i in range(0, len(items) - 1, 2)]
            if len(items) % 2:
                nxt.append(items[-1])
            items = nxt
        return items[0]

    def _repr_args(self) -> str:
        return ""


class Sum(_Reduction):
    """Elementwise sum of a sequence of tensors (or tuples of tensors); zeros if empty."""

    _kind = "Sum"
    _fn = torch.add


class Min(_Reduction):
    """Elementwise minimum of a sequence of tensors; zeros if empty (as in TF Fold)."""

    _kind = "Min"
    _fn = torch.minimum


class Max(_Reduction):
    """Elementwise maximum of a sequence of tensors; zeros if empty (as in TF Fold)."""

    _kind = "Max"
    _fn = torch.maximum


def _divide_by_count(total: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    # An empty sequence sums to zeros; dividing by max(n, 1) keeps its mean at zero.
    shape = (-1,) + (1,) * (total.dim() - 1)
    return total / count.clamp(min=1).reshape(shape)


def _mean_output(block: Block, t: Type) -> Type:
    return t[0]  # type: ignore[index]


class Mean(Sum):
    """Elementwise mean of a sequence of float tensors; zeros if empty."""

    _kind = "Sum"  # shares the sum's op: a mean's additions batch with every other sum's

    def __init__(self, name: str | None = None) -> None:
        super().__init__(name=name)
        self.divide = SharedOp("Mean", _divide_by_count, _mean_output)

    def _infer(self, input_type: Type) -> Type:
        item = super()._infer(input_type)
        if not (isinstance(item, TensorType) and item.dtype.is_floating_point):
            raise TypeError(f"{self!r} expects a sequence of float tensors, got {input_type!r}")
        self._count = TensorType((), item.dtype)
        return self.divide.infer(TupleType(item, self._count))

    def children(self) -> list[Block]:
        return [*super().children(), self.divide]

    def _trace(self, tr: Tracer, x: Any) -> Any:
        items = x if isinstance(x, list) else as_list(self, x)
        total = super()._trace(tr, items)
        return tr.apply(self.divide.op, [total, tr.constant(self._count, len(items))])[0]  # type: ignore[arg-type]
