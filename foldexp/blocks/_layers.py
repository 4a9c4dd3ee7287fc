"""Layers: ``nn.Module``s whose input size is inferred from the block type they meet.

Use them inside ``Function`` (``Scalar('int64') >> Function(Embedding(1000, 128))``) or directly
in a pipe (``>> FC(64)`` is converted to ``Function(FC(64))``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from foldexp.kernels import Dropout, Linear
from foldexp.types import TensorType, TupleType, Type

__all__ = ["FC", "Embedding"]


class FC(nn.Module):
    """A fully connected layer ``activation(x @ W + b)``.

    The input is a vector, or a tuple of vectors (concatenated first); its size is inferred from
    the input type when the block graph is typed.

    Args:
        num_units_out: output size.
        activation: applied to the result (default ``torch.relu``, as in TF Fold); ``None`` for
            a linear layer.
        input_keep_prob / output_keep_prob: dropout keep-probabilities (TF Fold's convention).
    """

    def __init__(
        self,
        num_units_out: int,
        activation: Callable[[torch.Tensor], torch.Tensor] | None = torch.relu,
        input_keep_prob: float | None = None,
        output_keep_prob: float | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__()
        self.num_units_out = num_units_out
        self.activation = activation
        self.input_size: int | None = None
        self.linear: Linear | None = None
        self.in_drop = Dropout(1 - input_keep_prob) if input_keep_prob else None
        self.out_drop = Dropout(1 - output_keep_prob) if output_keep_prob else None
        self.name = name

    def build_for_input_type(self, input_type: Type, block: Any = None) -> None:
        """Creates the weights for ``input_type`` (a vector or a tuple of vectors)."""
        items = input_type.items if isinstance(input_type, TupleType) else (input_type,)
        if not all(
            isinstance(t, TensorType) and t.ndim == 1 and t.dtype.is_floating_point for t in items
        ):
            raise TypeError(
                f"{block or self!r} expects a float vector or a tuple of float "
                f"vectors, got {input_type!r}"
            )
        size = sum(t.shape[0] for t in items)  # type: ignore[union-attr]
        if self.linear is None:
            self.input_size = size
            self.linear = Linear(size, self.num_units_out)
        elif size != self.input_size:
            raise TypeError(
                f"{block or self!r} was built for inputs of size {self.input_size}, "
                f"given {input_type!r} (size {size})"
            )

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        if self.linear is None:
            raise RuntimeError(f"{self!r} is used before its input size is known")
        x = xs[0] if len(xs) == 1 else torch.cat(xs, dim=1)
        if self.in_drop is not None:
            x = self.in_drop(x)
        y = self.linear(x)
        if self.activation is not None:
            y = self.activation(y)
        if self.out_drop is not None:
            y = self.out_drop(y)
        return y

    def __repr__(self) -> str:
        act = getattr(self.activation, "__name__", repr(self.activation))
        return f"FC({self.num_units_out}, activation={act})"


class Embedding(nn.Module):
    """A lookup table from integer ids in ``[0, num_buckets)`` to vectors of ``num_units_out``.

    ``Embedding(initializer=word_matrix)`` takes both sizes from the matrix (as in the paper's
    ``word2vec``).

    Args:
        num_buckets: number of rows (ids); optional when ``initializer`` is given.
        num_units_out: size of each vector; optional when ``initializer`` is given.
        initializer: optional ``(num_buckets, num_units_out)`` matrix (array or tensor) to start
            from, e.g. pretrained word vectors.
        trainable: ``False`` freezes the table.
    """

    def __init__(
        self,
        num_buckets: int | None = None,
        num_units_out: int | None = None,
        initializer: Any = None,
        trainable: bool = True,
        name: str | None = None,
    ) -> None:
        super().__init__()
        init = None
        if initializer is not None:
            init = torch.as_tensor(np.asarray(initializer), dtype=torch.float32)
            if init.dim() != 2:
                raise ValueError(f"Embedding initializer must be a matrix, got {tuple(init.shape)}")
            num_buckets = init.shape[0] if num_buckets is None else num_buckets
            num_units_out = init.shape[1] if num_units_out is None else num_units_out
        if num_buckets is None or num_units_out is None:
            raise ValueError("Embedding needs num_buckets and num_units_out, or an initializer")
        self.num_buckets, self.num_units_out = num_buckets, num_units_out
        weight = torch.empty(num_buckets, num_units_out)
        if init is None:
            nn.init.normal_(weight, std=1.0 / np.sqrt(num_units_out))
        else:
            if tuple(init.shape) != (num_buckets, num_units_out):
                raise ValueError(
                    f"Embedding initializer has shape {tuple(init.shape)}, expected "
                    f"({num_buckets}, {num_units_out})"
                )
            weight.copy_(init)
        self.weight = nn.Parameter(weight, requires_grad=trainable)
        self.name = name
        # As nn.Embedding's: a gradient of the rows read only (the trainer's choice,
        # foldexp/train/sparse_rows.py).
        self.sparse = False

    def build_for_input_type(self, input_type: Type, block: Any = None) -> None:
        if not (
            isinstance(input_type, TensorType)
            and input_type.ndim == 0
            and not input_type.dtype.is_floating_point
        ):
            raise TypeError(
                f"{block or self!r} expects a scalar integer id "
                f"(Scalar('int64')), got {input_type!r}"
            )

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return nn.functional.embedding(ids.long(), self.weight, sparse=self.sparse)

    def __repr__(self) -> str:
        return f"Embedding({self.num_buckets}, {self.num_units_out})"
