"""Embedding tables trained through sparse gradients wherever the update stays the same.

Why: a batch reads a few hundred rows of a word table, but a dense gradient is the whole table:
every step zeroes it, adds the rows in, and the optimizer then sweeps every entry. SST's
Tree-LSTM (a 21,208 x 50 GloVe table, batches of 25 sentences, 1 thread) spent ≈ 3 ms of a
24 ms step on that. A sparse gradient (``F.embedding(..., sparse=True)``) holds only the rows
read, and torch's optimizers update only those.

Only where the update is the same: an untouched row must not move. That holds for Adagrad and
for SGD without momentum when the table's weight decay is 0 (a dense step adds ``0`` to such a
row's accumulator and moves it by ``-lr * 0``); not for momentum, Adam's moment estimates or
weight decay, which move every row every step. The same in exact arithmetic: in floats a word
read twice in a batch has its two rows summed in another order, and Adagrad divides before it
scales, so parameters agree to rounding (≈ 1e-7 after a few steps), not bit for bit with a run
on the dense route. Gradient clipping (torch's norm has no sparse
kernel), several processes (DDP buckets dense gradients) and a table sharing a fused
optimizer's group with other parameters (a sparse gradient sends the whole group to torch's
slower unfused step) keep the dense route too. The choice is per table, made once after the
optimizer is built, and logged.

On the CPU only (``SPARSE_DEVICES``): on a GPU the dense sweep is one short kernel, while torch's
sparse step coalesces the rows (a ``unique`` whose size the host must read), so every step would
wait for the device (and a CUDA graph could not hold the step).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from foldexp.blocks import Embedding

__all__ = ["SPARSE_DEVICES", "use_sparse_table_gradients"]

# The device types whose tables take sparse gradients (see the module doc).
SPARSE_DEVICES = ("cpu",)


def _optimizer_of(optimizer: Any, param: torch.Tensor) -> tuple[Any, dict[str, Any]] | None:
    """The optimizer (of an ``OptimizerSet`` too) and the group holding ``param``."""
    for opt in getattr(optimizer, "optimizers", [optimizer]):
        for group in opt.param_groups:
            if any(p is param for p in group["params"]):
                return opt, group
    return None


def _same_update_when_sparse(opt: Any, group: dict[str, Any]) -> bool:
    if group.get("weight_decay", 0) or group.get("maximize", False):
        return False
    if group.get("fused") and len(group["params"]) > 1:
        return False  # a sparse gradient turns its whole group to torch's unfused step
    if type(opt) is torch.optim.Adagrad:
        return True
    return type(opt) is torch.optim.SGD and not group.get("momentum", 0)


def use_sparse_table_gradients(
    model: nn.Module, optimizer: Any, grad_clip: float, world_size: int
) -> list[str]:
    """Switches every trainable embedding table of ``model`` (``foldexp.blocks.Embedding`` or
    ``nn.Embedding``) on a device of ``SPARSE_DEVICES`` whose update is unchanged by it to
    sparse gradients; returns their module names."""
    if grad_clip or world_size > 1:
        return []
    names: dict[int, str] = {}  # a table reachable by several paths goes by its shortest name
    for name, module in model.named_modules(remove_duplicate=False):
        if isinstance(module, (Embedding, nn.Embedding)):
            old = names.get(id(module))
            names[id(module)] = name if old is None or len(name) < len(old) else old
    switched = []
    for module in {id(m): m for m in model.modules()}.values():
        if not isinstance(module, (Embedding, nn.Embedding)) or module.sparse:
            continue
        weight = module.weight
        if not weight.requires_grad or weight.layout != torch.strided:
            continue
        if weight.device.type not in SPARSE_DEVICES:
            continue
        found = _optimizer_of(optimizer, weight)
        if found is not None and _same_update_when_sparse(*found):
            module.sparse = True
            switched.append(names[id(module)] or type(module).__name__)
    if switched and not torch.sparse.check_sparse_tensor_invariants.is_enabled():
        # torch's sparse optimizer steps warn unless the (default) choice is made explicitly:
        # their tensors come from torch's own kernels, so the checks stay off (a user who turned
        # them on keeps them).
        torch.sparse.check_sparse_tensor_invariants.disable()
    return switched
