"""The CUDA generators in a checkpoint's RNG state (``checkpoint.rng_state``): saved where the
run used CUDA, not where it did not (asking would start a CUDA context on every GPU), and
restored for the devices the resuming machine has. CUDA is simulated: its calls are replaced
by a fake with ``count`` devices."""

from __future__ import annotations

import pytest
import torch

from foldexp.train import checkpoint


class _FakeCuda:
    def __init__(self, count: int, initialized: bool = True) -> None:
        self.count, self.initialized = count, initialized
        self.states = [torch.full((4,), i, dtype=torch.uint8) for i in range(count)]

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        cuda = torch.cuda
        monkeypatch.setattr(cuda, "is_available", lambda: True)
        monkeypatch.setattr(cuda, "is_initialized", lambda: self.initialized)
        monkeypatch.setattr(cuda, "device_count", lambda: self.count)
        monkeypatch.setattr(cuda, "get_rng_state_all", lambda: [s.clone() for s in self.states])
        monkeypatch.setattr(cuda, "set_rng_state", self.set_state)
        monkeypatch.setattr(cuda, "set_rng_state_all", self.set_all)

    def set_state(self, state: torch.Tensor, device: int | str = "cuda") -> None:
        index = 0 if isinstance(device, str) else int(device)
        if index >= self.count:  # as torch: no such device
            raise RuntimeError(f"CUDA error: invalid device ordinal {index}")
        self.states[index] = state.clone()

    def set_all(self, states: list[torch.Tensor]) -> None:
        for i, s in enumerate(states):
            self.set_state(s, i)


def test_a_run_on_two_gpus_resumes_on_a_machine_with_one(monkeypatch: pytest.MonkeyPatch) -> None:
    _FakeCuda(2).install(monkeypatch)
    saved = checkpoint.rng_state()
    assert len(saved["cuda"]) == 2
    one = _FakeCuda(1)
    one.install(monkeypatch)
    one.states[0] = torch.zeros(4, dtype=torch.uint8)
    checkpoint.set_rng_state(saved)
    assert torch.equal(one.states[0], saved["cuda"][0])


def test_a_run_that_never_used_cuda_saves_no_cuda_state(monkeypatch: pytest.MonkeyPatch) -> None:
    _FakeCuda(2, initialized=False).install(monkeypatch)
    assert "cuda" not in checkpoint.rng_state()
