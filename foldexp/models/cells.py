"""Recurrent cells as plain ``nn.Module``s, batched over their first dimension: the one
definition of the Tree-LSTM that the models, the paper's listings and the bench peers share.

They are what ``Function`` wraps inside tree and sequence models:

- binary Tree-LSTM (the N-ary Tree-LSTM of Tai et al. 2015 with N = 2, one fused matmul for all
  gates, one state update ``binary_state``): ``TreeLSTMLeaf`` and ``BinaryTreeLSTMCell``;
  ``WordTreeLSTMCell``, the same cell reading the node's own word too (calculator operators);
  ``TreeLSTMCell``, the same cell with an input vector, as the Fold paper's §3.5 writes it:
  ``TreeLSTM(x, h_left, h_right)``;
- child-sum Tree-LSTM (Tai et al. 2015, §3.1, any number of children), in the pieces the blocks
  of ``child_sum.py`` batch: ``ChildForget`` / ``ChildSumCombine``, and ``WordChildForget`` /
  ``WordChildSumCombine`` for nodes with a word;
- ``LSTMCell`` / ``GRUCell`` taking ``(state, input)`` pairs as ``Fold`` passes them.

The Tree-LSTM state updates (binary, leaf, child-sum combine) go through
``foldexp.kernels.treelstm``: one fused C++ kernel each way on CPU float32, torch ops elsewhere.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from foldexp.kernels import Dropout, Linear
from foldexp.kernels import treelstm as fused

__all__ = [
    "TreeLSTMLeaf",
    "BinaryTreeLSTMCell",
    "WordTreeLSTMCell",
    "TreeLSTMCell",
    "binary_state",
    "ChildForget",
    "ChildSumCombine",
    "WordChildForget",
    "WordChildSumCombine",
    "LSTMCell",
    "GRUCell",
]

State = tuple[torch.Tensor, torch.Tensor]  # (h, c), each (batch, hidden)


def _update_dropout(p: float) -> nn.Module | None:
    """Recurrent dropout of Semeniuta et al. (2016): dropped on the candidate update ``tanh(u)``
    only, so the memory ``c`` carried up the tree is never erased (the Fold paper's §3.5.1).
    ``None`` when off, so per-node loops (the peers bench) pay no extra module call."""
    return Dropout(p) if p > 0 else None


def _update_mask(dropout: nn.Module | None, z: torch.Tensor, hidden: int) -> torch.Tensor | None:
    """The multipliers (0 or 1/(1-p)) that ``dropout`` applies to ``tanh(u)``, ``(rows, hidden)``:
    dropout of ones draws the same Bernoulli numbers that dropout of ``tanh(u)`` would, one per
    element, so the fused kernel and torch ops drop the units the seed says."""
    if dropout is None or not dropout.training:
        return None
    return dropout(z.new_ones((z.shape[0], hidden)))


def binary_state(
    z: torch.Tensor, cl: torch.Tensor, cr: torch.Tensor, update_dropout: nn.Module | None = None
) -> State:
    """A binary Tree-LSTM node's ``(h, c)`` from its gates' pre-activations ``z``
    (``(batch, 5 * hidden)``, in the order i, f_left, f_right, o, u) and its children's memories:
    ``c = i ⊙ u + f_l ⊙ c_l + f_r ⊙ c_r``, ``h = o ⊙ tanh(c)``. One fused kernel each way on
    CPU float32 (``foldexp/kernels/treelstm.py``), torch ops elsewhere."""
    return fused.binary_state(z, cl, cr, _update_mask(update_dropout, z, cl.shape[1]))


class TreeLSTMLeaf(nn.Module):
    """A leaf's state from its input vector: ``c = i ⊙ u``, ``h = o ⊙ tanh(c)``.

    ``recurrent_dropout`` drops ``tanh(u)`` (see ``BinaryTreeLSTMCell``).
    """

    def __init__(self, input_size: int, hidden_size: int, recurrent_dropout: float = 0.0) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.gates = Linear(input_size, 3 * hidden_size)
        self.update_dropout = _update_dropout(recurrent_dropout)

    def forward(self, x: torch.Tensor) -> State:  # x: (batch, input)
        z = self.gates(x)
        return fused.leaf_state(z, _update_mask(self.update_dropout, z, self.hidden_size))


class BinaryTreeLSTMCell(nn.Module):
    """Binary (N-ary, N=2) Tree-LSTM: separate forget gates per child, all five gates from one
    matmul over ``[h_left; h_right]``.

    Args:
        recurrent_dropout: dropout on the candidate update ``tanh(u)`` (Semeniuta et al. 2016),
            the regulariser the Fold paper used instead of weight decay.
        forget_bias: initial bias of both forget gates (TF's LSTM cells start at 1.0, so a node
            first keeps its children's memory).
    """

    def __init__(
        self, hidden_size: int, recurrent_dropout: float = 0.0, forget_bias: float = 0.0
    ) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.gates = Linear(2 * hidden_size, 5 * hidden_size)
        self.update_dropout = _update_dropout(recurrent_dropout)
        if forget_bias:
            with torch.no_grad():  # gate order i, f_left, f_right, o, u
                self.gates.bias[hidden_size : 3 * hidden_size] += forget_bias

    def forward(self, left: State, right: State) -> State:
        (hl, cl), (hr, cr) = left, right
        return binary_state(self.gates(torch.cat([hl, hr], dim=1)), cl, cr, self.update_dropout)


class WordTreeLSTMCell(nn.Module):
    """``BinaryTreeLSTMCell`` that also reads the node's own word ``x`` (an operator symbol):
    the gates are ``cell.gates([h_l; h_r]) + x_gates(x)``.

    Args:
        recurrent_dropout: dropout on the candidate update, as ``BinaryTreeLSTMCell``'s.
        forget_bias: initial bias of both forget gates, as ``BinaryTreeLSTMCell``'s (the only
            bias of the gates: ``x_gates`` has none).
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        recurrent_dropout: float = 0.0,
        forget_bias: float = 0.0,
    ) -> None:
        super().__init__()
        self.cell = BinaryTreeLSTMCell(hidden_size, recurrent_dropout, forget_bias)
        self.x_gates = Linear(input_size, 5 * hidden_size, bias=False)

    def forward(self, x: torch.Tensor, children: tuple[State, State]) -> State:
        (hl, cl), (hr, cr) = children
        z = self.cell.gates(torch.cat([hl, hr], dim=1)) + self.x_gates(x)
        return binary_state(z, cl, cr, self.cell.update_dropout)


class TreeLSTMCell(nn.Module):
    """Binary N-ary Tree-LSTM with an input: ``forward(x, (left, right)) → (h, c)``.

    Tai et al. (2015) eqs. 9–14 with N = 2: leaves pass their word vector and zero child states,
    internal nodes a zero vector and their children's states (the Fold paper's §3.5). All five
    gates come from one matmul over ``[x; h_left; h_right]``. The input size is taken from the
    block type the cell meets in ``Function`` unless given.
    """

    def __init__(self, hidden_size: int, input_size: int | None = None) -> None:
        super().__init__()
        self.hidden_size, self.input_size = hidden_size, input_size
        self.gates: Linear | None = None
        if input_size is not None:
            self.gates = Linear(input_size + 2 * hidden_size, 5 * hidden_size)

    def build_for_input_type(self, input_type: Any, block: Any = None) -> None:
        """Sizes the gates from ``TupleType(TensorType(input), ((h, c), (h, c)))``."""
        from foldexp.types import TensorType, TupleType

        n = self.hidden_size
        state = TupleType(TensorType(n), TensorType(n))
        ok = (
            isinstance(input_type, TupleType)
            and len(input_type) == 2
            and isinstance(input_type[0], TensorType)
            and input_type[0].ndim == 1
            and input_type[1] == TupleType(state, state)
        )
        if not ok:
            raise TypeError(
                f"{block or self!r} expects (input vector, ((h, c), (h, c))) with h and c of "
                f"size {n}, got {input_type!r}"
            )
        size = input_type[0].shape[0]
        if self.gates is None:
            self.input_size = size
            self.gates = Linear(size + 2 * n, 5 * n)
        elif size != self.input_size:
            raise TypeError(f"{block or self!r} was built for inputs of size {self.input_size}")

    def forward(self, x: torch.Tensor, children: tuple[State, State]) -> State:
        if self.gates is None:
            raise RuntimeError(f"{self!r} is used before its input size is known")
        (hl, cl), (hr, cr) = children
        return binary_state(self.gates(torch.cat([x, hl, hr], dim=1)), cl, cr)


class ChildForget(nn.Module):
    """One child's gated memory, ``σ(U_f h_k + b_f) ⊙ c_k`` (a node without a word)."""

    def __init__(self, hidden_size: int, forget_bias: float = 0.0) -> None:
        super().__init__()
        self.gate = Linear(hidden_size, hidden_size)
        if forget_bias:
            with torch.no_grad():
                self.gate.bias += forget_bias

    def forward(self, h: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.gate(h)) * c


class ChildSumCombine(nn.Module):
    """A node's state from ``h̃`` and ``Σ f_k ⊙ c_k``: gates ``i, o, u`` from ``U h̃ + b``."""

    def __init__(self, hidden_size: int, recurrent_dropout: float = 0.0) -> None:
        super().__init__()
        self.gates = Linear(hidden_size, 3 * hidden_size)
        self.update_dropout = _update_dropout(recurrent_dropout)

    def forward(self, h_sum: torch.Tensor, fc_sum: torch.Tensor) -> State:
        z = self.gates(h_sum)
        mask = _update_mask(self.update_dropout, z, z.shape[1] // 3)
        return fused.leaf_state(z, mask, carry=fc_sum)


class WordChildForget(nn.Module):
    """``σ(U_f h_k + [W x + b]_f) ⊙ c_k``: a child's gated memory at a node with a word ``x``,
    given the node's projected word (all four gates' share, ``W x + b``)."""

    def __init__(self, hidden_size: int, forget_bias: float = 0.0) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.gate = Linear(hidden_size, hidden_size, bias=False)
        self.forget_bias = forget_bias

    def forward(self, child: State, x_gates: torch.Tensor) -> torch.Tensor:
        h, c = child
        x_f = x_gates[:, 3 * self.hidden_size :]
        return torch.sigmoid(self.gate(h) + x_f + self.forget_bias) * c


class WordChildSumCombine(nn.Module):
    """A node's state from its projected word, ``h̃`` and ``Σ f_k ⊙ c_k``."""

    def __init__(self, hidden_size: int, recurrent_dropout: float = 0.0) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.gates = Linear(hidden_size, 3 * hidden_size, bias=False)
        self.update_dropout = _update_dropout(recurrent_dropout)

    def forward(self, x_gates: torch.Tensor, h_sum: torch.Tensor, fc_sum: torch.Tensor) -> State:
        z = self.gates(h_sum) + x_gates[:, : 3 * self.hidden_size]
        mask = _update_mask(self.update_dropout, z, self.hidden_size)
        return fused.leaf_state(z, mask, carry=fc_sum)


class LSTMCell(nn.Module):
    """An LSTM step as a ``Fold`` combine: ``((h, c), x) → (h, c)``."""

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        self.cell = nn.LSTMCell(input_size, hidden_size)

    def forward(self, state: State, x: torch.Tensor) -> State:
        h, c = self.cell(x, state)
        return h, c


class GRUCell(nn.Module):
    """A GRU step as a ``Fold`` combine: ``(h, x) → h``."""

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        self.cell = nn.GRUCell(input_size, hidden_size)

    def forward(self, h: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return self.cell(x, h)
