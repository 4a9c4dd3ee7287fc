"""Optimizers from parameter groups, where a group may ask for an optimizer of its own.

Tai et al. (2015) train the Tree-LSTM with Adagrad but update the word table with plain SGD.
A model says so by putting ``"optimizer": "sgd"`` in that group (``model.param_groups()``);
``build_optimizer`` then gives those groups their own optimizer and steps every optimizer as
one, with one state dict, so checkpoints and resumption treat the pair as a single optimizer.

Every optimizer is built with ``fused=True`` where torch has a fused kernel for it on the
parameters' device (``fused_kernel_available``, which asks torch's operator registry and takes
one trial step: torch 2.11's Adagrad fuses on the CPU only, Adam, AdamW and SGD on CPU and
CUDA): one pass over each parameter's memory per step instead of one per arithmetic op. On SST's
Tree-LSTM (a 21,208 x 50 word table, 1 thread) Adagrad's step took 0.82 ms fused and 2.11 ms
unfused; results agree to float rounding (largest parameter difference 2.4e-7 after 5 steps),
which compounds over a run: the default experiment's test loss after 2 epochs read 0.1607
fused and 0.1666 unfused. ``optimizer.fused=false`` restores torch's per-op steps.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from functools import cache, partial
from typing import Any

import torch

__all__ = [
    "GROUP_OPTIMIZERS",
    "ROUTE_KEYS",
    "OptimizerSet",
    "build_optimizer",
    "fused_kernel_available",
    "load_optimizer_state",
    "param_groups",
]

# What a group's ``"optimizer"`` key may name: an optimizer class taking (groups, lr=...).
GROUP_OPTIMIZERS: dict[str, type[torch.optim.Optimizer]] = {
    "sgd": torch.optim.SGD,
    "adagrad": torch.optim.Adagrad,
    "adam": torch.optim.Adam,
}


class OptimizerSet:
    """Several optimizers over disjoint parameters, used as one (``step``, ``zero_grad``,
    ``state_dict``, ``load_state_dict``, ``param_groups``)."""

    def __init__(self, optimizers: list[torch.optim.Optimizer]) -> None:
        self.optimizers = optimizers

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return [g for opt in self.optimizers for g in opt.param_groups]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        for opt in self.optimizers:
            opt.step()

    def state_dict(self) -> dict[str, Any]:
        return {"optimizers": [opt.state_dict() for opt in self.optimizers]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        saved = state.get("optimizers")
        if saved is None or len(saved) != len(self.optimizers):
            raise ValueError(
                f"checkpoint holds {len(saved) if saved is not None else 'a single'} optimizer "
                f"state(s), this run has {len(self.optimizers)} optimizers: was the checkpoint "
                "written with another model.embedding_optimizer?"
            )
        for opt, s in zip(self.optimizers, saved):
            _load_keeping_routes(opt, s)


# How torch runs a step (one fused kernel, or one kernel per op over many tensors), not what it
# computes: chosen for this run's device when the optimizer is built, never read from a
# checkpoint, whose device may have had other kernels.
ROUTE_KEYS = ("fused", "foreach")


def load_optimizer_state(optimizer: Any, state: dict[str, Any]) -> None:
    """``optimizer.load_state_dict(state)``, but each group keeps the route its optimizer was
    built with here (``fused``, ``foreach``): torch copies a saved group's options over the
    live ones, so an Adagrad checkpoint written on the CPU (fused) made the resumed CUDA run
    step with ``fused=True``, which torch 2.11's Adagrad refuses on CUDA."""
    if isinstance(optimizer, OptimizerSet):
        optimizer.load_state_dict(state)
    else:
        _load_keeping_routes(optimizer, state)


def _load_keeping_routes(opt: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    groups = state.get("param_groups")
    if isinstance(groups, list) and len(groups) == len(opt.param_groups):
        live = [{k: g[k] for k in ROUTE_KEYS if k in g} for g in opt.param_groups]
        groups = [{**saved, **ours} if isinstance(saved, dict) else saved
                  for saved, ours in zip(groups, live)]  # fmt: skip
        state = {**state, "param_groups": groups}
    opt.load_state_dict(state)


def fused_kernel_available(
    cls: type, device: torch.device | str, dtype: torch.dtype = torch.float32
) -> bool:
    """Whether torch takes ``cls``'s fused step for parameters of ``dtype`` on ``device``,
    asked of torch itself rather than a list of ours: the device type must be one torch's
    optimizers accept ``fused=True`` for, the operator the fused step calls
    (``aten::_fused_<name>_``: ``_fused_adam_``, ``_fused_adagrad_``, ...) must have a kernel
    for that device's dispatch key, and one step of ``cls`` with ``fused=True`` on a
    one-element parameter there must run. The registry alone is not enough: torch 2.11 registers
    ``_fused_adagrad_`` for CUDA, yet its Adagrad refuses ``fused=True`` on CUDA inside
    ``step()``. The trial step's answer is kept per class, device and dtype."""
    from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

    device = torch.device(device)
    if not isinstance(cls, type) or "fused" not in inspect.signature(cls.__init__).parameters:
        return False
    if device.type not in _get_fused_kernels_supported_devices():
        return False
    op = f"aten::_fused_{cls.__name__.lower()}_"
    try:
        key = torch._C._dispatch_key_for_device(device.type)
        if not torch._C._dispatch_has_kernel_for_dispatch_key(op, key):
            return False
    except RuntimeError:  # no such operator or dispatch key in this torch: no fused kernel
        return False
    return _fused_step_runs(cls, device, dtype)


@cache
def _fused_step_runs(cls: type, device: torch.device, dtype: torch.dtype) -> bool:
    """One fused step of ``cls`` on a zero parameter with a zero gradient: whether torch takes
    it (a step of zeros changes nothing it is not thrown away with)."""
    try:
        p = torch.zeros(1, device=device, dtype=dtype, requires_grad=True)
        p.grad = torch.zeros_like(p)
        cls([p], lr=1e-3, fused=True).step()
    except (RuntimeError, TypeError, ValueError, AssertionError):
        return False
    return True


def _fused(make: Callable[..., torch.optim.Optimizer], groups: list[dict[str, Any]]) -> Any:
    """``make(groups)``, with ``fused=True`` where the optimizer class has a fused kernel for
    these parameters (dense floating point, all on one device torch has the kernel for: see
    ``fused_kernel_available``), unless ``make`` carries ``fused=False`` (``optimizer.fused``);
    ``make``'s own ``fused`` is never passed on, so classes without the option take the config
    too."""
    keywords = dict(make.keywords) if isinstance(make, partial) else {}
    want = keywords.pop("fused", True)
    cls = make.func if isinstance(make, partial) else make
    base = partial(cls, *(make.args if isinstance(make, partial) else ()), **keywords)
    params = [p for g in groups for p in g["params"]]
    devices = {p.device for p in params}
    fusable = (
        bool(want)
        and len(devices) == 1
        and all(p.is_floating_point() and p.layout == torch.strided for p in params)
        and all(fused_kernel_available(cls, p.device, p.dtype) for p in _one_per_dtype(params))
    )
    if fusable:
        try:
            optimizer = base(groups, fused=True)
        except (RuntimeError, ValueError):  # no fused kernel for this dtype or option here
            return base(groups)
        optimizer.register_step_pre_hook(_unfuse_for_sparse_gradients)
        return optimizer
    return base(groups)


def _one_per_dtype(params: list[torch.Tensor]) -> list[torch.Tensor]:
    return list({p.dtype: p for p in params}.values())


def _unfuse_for_sparse_gradients(optimizer: torch.optim.Optimizer, *_: Any) -> None:
    """Before a step: a group whose gradients came sparse (``nn.Embedding(sparse=True)``) takes
    torch's unfused step, which handles them; fused kernels refuse sparse gradients."""
    for group in optimizer.param_groups:
        if group.get("fused") and any(
            p.grad is not None and p.grad.is_sparse for p in group["params"]
        ):
            group["fused"] = False


def build_optimizer(
    make_main: Callable[[list[dict[str, Any]]], torch.optim.Optimizer],
    groups: list[dict[str, Any]],
) -> torch.optim.Optimizer | OptimizerSet:
    """``make_main(groups)`` for the groups that name no optimizer; each other group gets an
    optimizer of the class its ``"optimizer"`` key names (``GROUP_OPTIMIZERS``), with its own
    ``lr`` and ``weight_decay``. One optimizer when no group names one.

    Raises:
        ValueError: a group names an optimizer not in ``GROUP_OPTIMIZERS``.
    """
    main = [g for g in groups if not g.get("optimizer")]
    own = [g for g in groups if g.get("optimizer")]
    if not own:
        return _fused(make_main, main)
    optimizers = [_fused(make_main, main)] if main else []
    for g in own:
        name = str(g["optimizer"])
        cls = GROUP_OPTIMIZERS.get(name)
        if cls is None:
            raise ValueError(
                f"parameter group optimizer {name!r}; expected one of {sorted(GROUP_OPTIMIZERS)}"
            )
        group = {k: v for k, v in g.items() if k != "optimizer"}
        fused = make_main.keywords.get("fused", True) if isinstance(make_main, partial) else True
        optimizers.append(_fused(partial(cls, lr=group["lr"], fused=fused), [group]))
    return OptimizerSet(optimizers)


def param_groups(model: Any, lr: float) -> list[dict[str, Any]]:
    """The optimizer's parameter groups: the model's own (``model.param_groups()``, each with
    optional ``lr``, ``weight_decay`` and ``optimizer``) or one group; frozen parameters left
    out, and a group without ``lr`` takes ``lr``."""
    groups = (
        model.param_groups()
        if hasattr(model, "param_groups")
        else [{"params": list(model.parameters())}]
    )
    out = []
    for g in groups:
        params = [p for p in g["params"] if p.requires_grad]
        if params:
            out.append({**g, "params": params, "lr": g.get("lr") or lr})
    return out
