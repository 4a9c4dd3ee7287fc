"""Recurrent cells as plain ``nn.Module``s, batched over their first dimension.

They are what ``Function`` wraps inside tree and sequence models: ``TreeLSTMLeaf`` and
``BinaryTreeLSTMCell`` (the binary N-ary Tree-LSTM of Tai et al. 2015, one fused matmul for all
gates), ``ChildSumTreeLSTMCell``, and ``LSTMCell`` / ``GRUCell`` taking ``(state, input)`` pairs
as ``Fold`` passes them.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["TreeLSTMLeaf", "BinaryTreeLSTMCell", "ChildSumTreeLSTMCell", "LSTMCell", "GRUCell"]

State = tuple[torch.Tensor, torch.Tensor]  # (h, c), each (batch, hidden)


class TreeLSTMLeaf(nn.Module):
    """A leaf's state from its input vector: ``c = i ⊙ u``, ``h = o ⊙ tanh(c)``."""

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.gates = nn.Linear(input_size, 3 * hidden_size)

    def forward(self, x: torch.Tensor) -> State:  # x: (batch, input)
        i, o, u = self.gates(x).chunk(3, dim=1)
        c = torch.sigmoid(i) * torch.tanh(u)
        h = torch.sigmoid(o) * torch.tanh(c)
        return h, c


class BinaryTreeLSTMCell(nn.Module):
    """Binary (N-ary, N=2) Tree-LSTM: separate forget gates per child, all five gates from one
    matmul over ``[h_left; h_right]``."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.gates = nn.Linear(2 * hidden_size, 5 * hidden_size)

    def forward(self, left: State, right: State) -> State:
        (hl, cl), (hr, cr) = left, right
        i, fl, fr, o, u = self.gates(torch.cat([hl, hr], dim=1)).chunk(5, dim=1)
        c = torch.sigmoid(i) * torch.tanh(u) + torch.sigmoid(fl) * cl + torch.sigmoid(fr) * cr
        h = torch.sigmoid(o) * torch.tanh(c)
        return h, c


class ChildSumTreeLSTMCell(nn.Module):
    """Child-sum Tree-LSTM over a fixed number of children given as separate states plus an
    input vector: ``forward(x, *children)``; ``h̃ = Σ h_k``, one forget gate per child."""

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.x_gates = nn.Linear(input_size, 4 * hidden_size)
        self.h_iou = nn.Linear(hidden_size, 3 * hidden_size, bias=False)
        self.h_f = nn.Linear(hidden_size, hidden_size, bias=False)

    def forward(self, x: torch.Tensor, *children: State) -> State:
        xi, xo, xu, xf = self.x_gates(x).chunk(4, dim=1)
        if children:
            h_sum = torch.stack([h for h, _ in children]).sum(0)
        else:
            h_sum = x.new_zeros(x.shape[0], self.hidden_size)
        hi, ho, hu = self.h_iou(h_sum).chunk(3, dim=1)
        c = torch.sigmoid(xi + hi) * torch.tanh(xu + hu)
        for h_k, c_k in children:
            c = c + torch.sigmoid(xf + self.h_f(h_k)) * c_k
        h = torch.sigmoid(xo + ho) * torch.tanh(c)
        return h, c


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
