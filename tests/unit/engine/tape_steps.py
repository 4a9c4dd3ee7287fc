"""For the tape's tests (``test_tape.py``, ``test_tape_not_compiled.py``,
``test_shared_captures.py``): one training step of a compiled model in a given ``device.compile``
mode (the loss and every parameter's gradient), and a counter of a function's calls."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from foldexp import Compiler
from foldexp.executor import set_compile_mode


def step(model: Compiler, inputs: list, mode: str) -> tuple[float, list[torch.Tensor]]:
    """The loss ``sum(out²)`` and the gradients, dense (a word table's sparse one as the dense it
    stands for) and zero where a parameter took none."""
    set_compile_mode(mode)
    model.zero_grad(set_to_none=True)
    loss = model(inputs).pow(2).sum()
    loss.backward()
    grads = []
    for p in model.parameters():
        g = p.grad
        grads.append(
            torch.zeros_like(p) if g is None else g.to_dense() if g.is_sparse else g.clone()
        )
    return loss.item(), grads


def count_calls(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> list[int]:
    """Counts the calls of ``owner.name`` from now to the test's end (``[count]``)."""
    calls = [0]
    real = getattr(owner, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls
