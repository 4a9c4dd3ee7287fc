"""One training step of a compiled model in a given ``device.compile`` mode, for the tape's tests
(``test_tape.py``, ``test_tape_not_compiled.py``): the loss and every parameter's gradient."""

from __future__ import annotations

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
