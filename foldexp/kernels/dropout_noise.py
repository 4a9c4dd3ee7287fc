"""Dropout with torch's own random numbers, drawn faster (``dropout_noise.cpp``).

``dropout(x, p, training)`` equals ``F.dropout(x, p, training)`` bit for bit, and leaves torch's
default generator in the same state: on CPU, torch draws the dropout noise with
``bernoulli_(1 - p)`` one element at a time from its Mersenne Twister (about 9 ns an element:
1.7 ms of an SST Tree-LSTM training step of 17). The native library computes the same twister
outputs in vectorised blocks and writes the generator's state back, so every mask, every trained
weight and every result stay what they were. ``Dropout`` is ``nn.Dropout`` with that forward
(the same module for ``Op.is_random`` and ``state_dict``); foldexp's models and blocks use it.

Where: a contiguous CPU float32 tensor, the library built, ``device.fused_cells`` not ``false``
(the switch for foldexp's C++ kernels), no tracer, ``torch.compile``, ``torch.func`` transform,
``__torch_function__`` or dispatch mode active (they see ``F.dropout``), and, checked once per
process, this torch drawing exactly as the kernel does: a torch whose generator or dropout changes
gets its own dropout back (``exact_noise_available``). Everywhere else ``F.dropout`` runs.

Threads. torch's own draw holds the generator's lock; this one reads the state, draws, and
writes the state back. Just before writing it reads the state again: if another thread drew in
the meantime, the noise is discarded and torch's dropout draws from where that thread left the
generator. What remains is the instant between that second read and the write: a draw another
thread makes from the default generator exactly then would repeat numbers this call drew.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import _get_current_dispatch_mode

from foldexp.kernels.native import fused_cells_enabled, load_kernels, transforms_active

__all__ = ["Dropout", "dropout", "exact_noise_available"]

_STATE_BYTES = 5056  # torch's CPUGeneratorImpl::get_state() in the versions the probe accepts
_exact: bool | None = None  # the probe's answer, once asked


def _draw_noise(x: torch.Tensor, keep: float) -> torch.Tensor | None:
    """The multipliers (``1/keep`` or 0) that ``torch.dropout`` would draw for ``x`` now, from
    the default generator (advanced as torch advances it); ``None`` if its state is unreadable."""
    noise = torch.empty_like(x, memory_format=torch.contiguous_format)  # x: CPU float32
    gen = torch.default_generator
    before = gen.get_state()
    if before.numel() != _STATE_BYTES:
        return None
    after = before.clone()
    if load_kernels().dropout_noise(noise.numel(), keep, noise.data_ptr(), after.data_ptr()) != 0:
        return None
    if not torch.equal(gen.get_state(), before):  # another thread drew meanwhile: see the doc
        return None
    gen.set_state(after)
    return noise


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int32)  # -0.0 and 0.0 differ, as the two routes' products must not


def _reproduces_torch() -> bool:
    """Whether the kernel draws what this torch's dropout draws: values, and the generator's
    state after the draw, for a few rates over several twister blocks. The generator is left as
    it was found."""
    gen = torch.default_generator
    saved = gen.get_state()
    x = torch.linspace(-1.0, 1.0, 3001, dtype=torch.float32, device="cpu")
    try:
        for p in (0.2, 0.5, 0.9):
            gen.set_state(saved)
            ref = torch.dropout(x, p, True)
            after_ref = gen.get_state()
            gen.set_state(saved)
            noise = _draw_noise(x, 1.0 - p)
            if noise is None or not torch.equal(_bits(ref), _bits(x * noise)):
                return False
            if not torch.equal(after_ref, gen.get_state()):
                return False
        return True
    except Exception:  # noqa: BLE001  (any surprise from torch's internals: its own dropout)
        return False
    finally:
        gen.set_state(saved)


def exact_noise_available() -> bool:
    """The library is built and draws exactly what this torch's dropout draws (tried once)."""
    global _exact
    if _exact is None:
        _exact = load_kernels() is not None and _reproduces_torch()
    return _exact


def _takes(x: torch.Tensor) -> bool:
    return (
        type(x) in (torch.Tensor, nn.Parameter)
        and x.device.type == "cpu"
        and x.dtype == torch.float32
        and x.is_contiguous()
        and x.numel() > 0
        and fused_cells_enabled()
        and not transforms_active()
        and not torch._C._is_torch_function_mode_enabled()
        and _get_current_dispatch_mode() is None
        and exact_noise_available()
    )


def dropout(
    x: torch.Tensor, p: float = 0.5, training: bool = True, inplace: bool = False
) -> torch.Tensor:
    """``F.dropout(x, p, training, inplace)``, its noise drawn by the native kernel where it can
    be (see the module doc); the same values, gradients and generator state either way."""
    if not training or not 0.0 < p < 1.0 or not _takes(x):
        return F.dropout(x, p, training, inplace)
    noise = _draw_noise(x, 1.0 - float(p))  # torch takes p as a double: a float32 p rounds else
    if noise is None:
        return F.dropout(x, p, training, inplace)
    return x.mul_(noise) if inplace else x * noise  # as torch's dropout multiplies


class Dropout(nn.Dropout):
    """``nn.Dropout`` whose forward is ``dropout``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.jit.is_scripting():  # TorchScript compiles F.dropout, not the kernel's route
            return F.dropout(x, self.p, self.training, self.inplace)
        return dropout(x, self.p, self.training, self.inplace)
