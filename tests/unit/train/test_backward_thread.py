"""The training loop's backward runs on the calling thread: autograd's device threads off (a
GPU's backward is otherwise handed to CUDA's worker thread, which the engine's many small
backward calls pay for), the setting restored after."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch

from foldexp.train.distributed import DistContext, StepBook


class _Probe(torch.autograd.Function):
    """Records, when its backward runs, the thread and autograd's device-thread setting."""

    seen: list[tuple[int, bool]] = []

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:  # noqa: ANN001
        return x * 2

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> torch.Tensor:  # noqa: ANN001
        _Probe.seen.append((threading.get_ident(), torch._C._is_multithreading_enabled()))
        return g * 2


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_the_training_backward_runs_on_the_calling_thread(tmp_path: Path, device: str) -> None:
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    _Probe.seen.clear()
    model = torch.nn.Linear(2, 1).to(device)
    book = StepBook(DistContext(), model, False, tmp_path / "ranks.csv", fresh=True)
    x = torch.ones(3, 2, device=device)
    book.backward(_Probe.apply(model(x)).sum(), shard=None)
    assert _Probe.seen == [(threading.get_ident(), False)]
    assert model.weight.grad is not None
    assert torch._C._is_multithreading_enabled()  # this thread's setting is restored
