"""``Function`` over a plain function refuses modules and trainable tensors the function reaches
(closure, defaults, partial arguments, bound object, named globals): a compiled model would
leave them untrained and their dropout merged, silently."""

from __future__ import annotations

import functools

import pytest
import torch
from torch import nn

import foldexp.blocks as fb
from foldexp import Compiler
from foldexp.testing import check_block

torch.manual_seed(0)
GLOBAL_LINEAR = nn.Linear(3, 3)


class _Holder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def apply_lin(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x)


def _closure_over(module: nn.Module):
    return lambda x: module(x)


def _default_arg(x: torch.Tensor, layer: nn.Module = GLOBAL_LINEAR) -> torch.Tensor:
    return layer(x)


def _helper(x: torch.Tensor) -> torch.Tensor:  # a helper that calls a module
    return GLOBAL_LINEAR(x)


def _countdown(x: torch.Tensor, n: int = 2) -> torch.Tensor:  # names itself: no endless search
    return x if n == 0 else _countdown(torch.tanh(x), n - 1)


class _PlainHolder:  # not a module: a class that keeps a layer as an attribute
    def __init__(self) -> None:
        self.lin = nn.Linear(3, 3)

    def apply_lin(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x)


WEIGHT = torch.randn(3, 3, requires_grad=True)
CASES = {
    "helper": (
        lambda x: _helper(x) + 1,
        "global `GLOBAL_LINEAR`, inside global `_helper` (Linear with 12",
    ),
    "helper in closure": (
        _closure_over(_closure_over(nn.Linear(3, 3))),
        "`module` from its closure, inside `module` from its closure (Linear with 12",
    ),
    "plain object": (_PlainHolder().apply_lin, "`_PlainHolder` object the method is bound to"),
    "closure": (_closure_over(nn.Linear(3, 3)), "`module` from its closure (Linear with 12"),
    "global": (lambda x: GLOBAL_LINEAR(x), "global `GLOBAL_LINEAR` (Linear with 12"),
    "default": (_default_arg, "a default argument (Linear with 12"),
    "partial": (
        functools.partial(lambda m, x: m(x), nn.Linear(3, 3)),
        "an argument bound by functools.partial (Linear with 12",
    ),
    "bound method": (_Holder().apply_lin, "`_Holder` object the method is bound to"),
    "tensor": (lambda x: x @ WEIGHT, "a tensor of shape (3, 3) that requires grad"),
    "list": (_closure_over([nn.Linear(3, 3)]), "Linear with 12 trainable parameters"),
    "dropout": (_closure_over(nn.Dropout(0.5)), "Dropout, random in training"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_reached_state_is_refused_naming_it_and_the_fix(case) -> None:
    fn, where = CASES[case]
    with pytest.raises(TypeError) as err:
        Compiler(fb.Vector(3) >> fb.Function(fn))
    assert where in str(err.value)
    assert "Function(module)" in str(err.value) and "no gradient" in str(err.value)


def test_constants_frozen_modules_and_declared_randomness_are_accepted() -> None:
    frozen = nn.Linear(3, 3).requires_grad_(False)
    scale = torch.full((3,), 2.0)  # a plain tensor: a constant, as documented
    drop = nn.Dropout(0.5)
    for fn, random in (
        (lambda x: frozen(x) * scale, False),
        (lambda x: drop(x), True),
        (lambda x: torch.tanh(x) + 1, False),
        (lambda x: _countdown(x) * scale, False),
        (torch.nn.functional.relu, False),
        (functools.partial(torch.nn.functional.leaky_relu, negative_slope=0.1), False),
    ):
        Compiler(fb.Vector(3) >> fb.Function(fn, random=random))
    check_block(fb.Vector(3) >> fb.Function(lambda x: frozen(x) * scale), [[1.0, 2, 3], [0, 1, 0]])


def test_the_module_itself_trains_as_the_error_advises() -> None:
    lin = nn.Linear(3, 2)
    compiler = check_block(fb.Vector(3) >> fb.Function(lin), [[1.0, 2, 3], [0, 1, 0]])
    assert {id(p) for p in compiler.parameters()} == {id(lin.weight), id(lin.bias)}
