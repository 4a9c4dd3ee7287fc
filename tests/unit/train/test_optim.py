"""``build_optimizer``: a parameter group with an optimizer of its own (plain SGD on the word
table, as Tai et al. 2015), stepped, saved and resumed as one optimizer."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import pytest
import torch

from foldexp.train.app import compose_config
from foldexp.train.optim import OptimizerSet, build_optimizer


def _params() -> tuple[torch.nn.Parameter, torch.nn.Parameter]:
    torch.manual_seed(0)
    return torch.nn.Parameter(torch.randn(4, 3)), torch.nn.Parameter(torch.randn(5, 2))


def _grads(*params: torch.nn.Parameter) -> None:
    for p in params:
        p.grad = torch.randn_like(p)


def test_groups_without_an_optimizer_of_their_own_get_the_main_one() -> None:
    w, e = _params()
    opt = build_optimizer(partial(torch.optim.Adagrad, lr=0.1), [{"params": [w]}, {"params": [e]}])
    assert isinstance(opt, torch.optim.Adagrad) and len(opt.param_groups) == 2


def test_sgd_group_takes_plain_sgd_steps_and_the_rest_adagrad() -> None:
    w, e = _params()
    groups = [
        {"params": [w], "lr": 0.1},
        {"params": [e], "lr": 0.5, "weight_decay": 0.0, "optimizer": "sgd"},
    ]
    opt = build_optimizer(partial(torch.optim.Adagrad, lr=0.1), groups)
    assert isinstance(opt, OptimizerSet)
    assert [type(o) for o in opt.optimizers] == [torch.optim.Adagrad, torch.optim.SGD]
    w0, e0 = w.detach().clone(), e.detach().clone()
    _grads(w, e)
    opt.step()
    # SGD: exactly lr * grad; Adagrad's first step: lr * sign(grad) (g / sqrt(g^2)).
    assert torch.allclose(e.detach(), e0 - 0.5 * e.grad)
    assert torch.allclose(w.detach(), w0 - 0.1 * torch.sign(w.grad), atol=1e-6)
    opt.zero_grad()
    assert w.grad is None and e.grad is None


def test_state_round_trips_and_a_mismatch_is_named() -> None:
    w, e = _params()
    groups = [{"params": [w], "lr": 0.1}, {"params": [e], "lr": 0.5, "optimizer": "sgd"}]
    opt = build_optimizer(partial(torch.optim.Adagrad, lr=0.1), groups)
    _grads(w, e)
    opt.step()
    state = opt.state_dict()
    fresh = build_optimizer(partial(torch.optim.Adagrad, lr=0.1), groups)
    fresh.load_state_dict(state)
    assert torch.equal(
        fresh.optimizers[0].state_dict()["state"][0]["sum"],
        state["optimizers"][0]["state"][0]["sum"],
    )
    with pytest.raises(ValueError, match="embedding_optimizer"):
        fresh.load_state_dict(torch.optim.Adagrad([w]).state_dict())


def test_unknown_group_optimizer_is_named() -> None:
    w, _ = _params()
    with pytest.raises(ValueError, match="'rmsprop'"):
        build_optimizer(torch.optim.Adagrad, [{"params": [w], "lr": 0.1, "optimizer": "rmsprop"}])


def test_sgd_word_table_trains_and_resumes_like_an_uninterrupted_run(
    resume_matches_uninterrupted, tiny
) -> None:
    resume_matches_uninterrupted([*tiny, "model.embedding_optimizer=sgd", "model.embedding_lr=0.5"])


def test_embedding_optimizer_value_is_checked_at_compose_time(tmp_path: Path, tiny) -> None:
    with pytest.raises(Exception, match="embedding_optimizer"):
        compose_config([*tiny, "model.embedding_optimizer=adamw"], tmp_path)


@pytest.mark.parametrize("cls", [torch.optim.Adagrad, torch.optim.Adam, torch.optim.SGD])
def test_fused_where_torch_has_a_kernel_with_the_unfused_results(cls) -> None:
    w, e = _params()
    w2, e2 = (torch.nn.Parameter(p.detach().clone()) for p in (w, e))
    fused = build_optimizer(partial(cls, lr=0.1, weight_decay=0.01), [{"params": [w, e]}])
    plain = cls([w2, e2], lr=0.1, weight_decay=0.01)
    assert fused.param_groups[0]["fused"] is True
    for _ in range(5):
        _grads(w, e)
        w2.grad, e2.grad = w.grad.clone(), e.grad.clone()
        fused.step()
        plain.step()
    torch.testing.assert_close(w, w2)
    torch.testing.assert_close(e, e2)


def test_unfused_where_there_is_no_kernel_or_the_user_chose() -> None:
    w, e = _params()
    rms = build_optimizer(partial(torch.optim.RMSprop, lr=0.1), [{"params": [w]}])
    assert isinstance(rms, torch.optim.RMSprop)
    own = build_optimizer(partial(torch.optim.Adagrad, lr=0.1, fused=False), [{"params": [w]}])
    assert not own.param_groups[0]["fused"]
    # the config's switch reaches a class without the option, and a group's own optimizer
    rms = build_optimizer(partial(torch.optim.RMSprop, lr=0.1, fused=True), [{"params": [w]}])
    assert isinstance(rms, torch.optim.RMSprop)
    groups = [{"params": [w]}, {"params": [e], "lr": 0.5, "optimizer": "sgd"}]
    off = build_optimizer(partial(torch.optim.Adagrad, lr=0.1, fused=False), groups)
    assert not any(g["fused"] for g in off.param_groups)
    ints = build_optimizer(partial(torch.optim.SGD, lr=0.1), [{"params": [e.detach().long()]}])
    assert not ints.param_groups[0]["fused"]


@pytest.mark.filterwarnings("ignore:Sparse invariant checks:UserWarning")  # torch's own notice
def test_sparse_gradients_take_the_unfused_step() -> None:
    # nn.Embedding(sparse=True): fused kernels refuse sparse gradients, torch's own step takes them
    torch.manual_seed(0)
    emb = torch.nn.Embedding(10, 3, sparse=True)
    ref = torch.nn.Embedding(10, 3, sparse=True)
    ref.load_state_dict(emb.state_dict())
    for cls in (torch.optim.Adagrad, torch.optim.SGD):
        opt = build_optimizer(partial(cls, lr=0.1), [{"params": list(emb.parameters())}])
        plain = cls(list(ref.parameters()), lr=0.1)
        for ids in ([1, 2, 2], [7, 1]):
            for m, o in ((emb, opt), (ref, plain)):
                o.zero_grad()
                m(torch.tensor(ids)).square().sum().backward()
                o.step()
        torch.testing.assert_close(emb.weight, ref.weight)


_ALL_OPTIMIZERS = [
    torch.optim.Adagrad,
    torch.optim.Adam,
    torch.optim.AdamW,
    torch.optim.SGD,
    torch.optim.RMSprop,
    torch.optim.Adadelta,
]


def _fused_step_works(cls: type, device: str) -> bool:
    """Whether torch itself takes a fused step of ``cls`` on ``device`` (construction and the
    first step: torch 2.11 refuses CUDA Adagrad only inside ``step()``)."""
    p = torch.nn.Parameter(torch.randn(3, device=device))
    p.grad = torch.randn_like(p)
    try:
        cls([p], lr=0.1, fused=True).step()
    except (RuntimeError, TypeError, ValueError):
        return False
    return True


@pytest.mark.parametrize(
    "device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)], ids=["cpu", "cuda"]
)
@pytest.mark.parametrize("cls", _ALL_OPTIMIZERS, ids=lambda c: c.__name__)
def test_the_fused_choice_agrees_with_what_torch_runs(cls, device: str) -> None:
    from foldexp.train.optim import fused_kernel_available

    assert fused_kernel_available(cls, device) == _fused_step_works(cls, device)


def test_the_fused_choice_is_asked_per_device_and_optimizer(monkeypatch) -> None:
    """A CUDA build of torch 2.11, as it was met on an H200: its registry has fused Adagrad,
    Adam, AdamW and SGD kernels for CPU and CUDA, but its Adagrad refuses ``fused=True`` on
    CUDA inside ``step()``. Adagrad on CUDA takes the unfused step, Adam the fused one."""
    from foldexp.train import optim

    cuda_build = {
        (f"aten::_fused_{n}_", k)
        for n in ("adagrad", "adam", "adamw", "sgd")
        for k in ("CPU", "CUDA")
    }
    monkeypatch.setattr(
        torch._C, "_dispatch_has_kernel_for_dispatch_key", lambda op, key: (op, key) in cuda_build
    )
    trials = []

    def step_runs(cls: type, device: torch.device, dtype: torch.dtype) -> bool:
        trials.append((cls, device.type, dtype))
        return device.type == "cpu" or cls is not torch.optim.Adagrad

    monkeypatch.setattr(optim, "_fused_step_runs", step_runs)
    ask = optim.fused_kernel_available
    assert not ask(torch.optim.Adagrad, "cuda") and ask(torch.optim.Adagrad, "cpu")
    assert ask(torch.optim.Adam, "cuda") and ask(torch.optim.AdamW, torch.device("cuda", 1))
    assert ask(torch.optim.SGD, "cuda") and not ask(torch.optim.RMSprop, "cpu")
    assert not ask(torch.optim.Adam, "meta")  # not a device torch fuses on at all
    assert (torch.optim.Adagrad, "cuda", torch.float32) in trials  # the registry said yes
    assert all(cls is not torch.optim.RMSprop for cls, _, _ in trials)  # the registry said no
    # build_optimizer asks about its parameters' device: a CPU without Adam's fused kernel in
    # the registry (Adagrad's there) gets the unfused Adam and the fused Adagrad
    cuda_build.discard(("aten::_fused_adam_", "CPU"))
    w, _ = _params()
    adam = build_optimizer(partial(torch.optim.Adam, lr=0.1), [{"params": [w]}])
    adagrad = build_optimizer(partial(torch.optim.Adagrad, lr=0.1), [{"params": [w]}])
    assert not adam.param_groups[0]["fused"] and adagrad.param_groups[0]["fused"]


@pytest.mark.parametrize("as_set", [False, True], ids=["optimizer", "optimizer set"])
def test_a_resumed_optimizer_keeps_the_route_built_for_its_device(as_set: bool) -> None:
    """A checkpoint's groups carry the route of the device that wrote them (``fused=True``:
    Adagrad on the CPU); loaded where that kernel does not exist (torch 2.11's CUDA Adagrad,
    here an optimizer built unfused), the live route stays: torch would copy the saved one."""
    from foldexp.train.optim import load_optimizer_state

    def make(fused: bool) -> Any:
        torch.manual_seed(0)
        w = torch.nn.Parameter(torch.randn(4, 3))
        w.grad = torch.randn(4, 3)
        opt = torch.optim.Adagrad([w], lr=0.1, fused=fused)
        opt.step()
        return OptimizerSet([opt]) if as_set else opt

    written = make(fused=True).state_dict()
    resumed = make(fused=False)
    load_optimizer_state(resumed, written)
    assert resumed.param_groups[0]["fused"] is False
    assert resumed.param_groups[0]["lr"] == 0.1  # what the step computes still comes back
    saved = written["optimizers"][0] if as_set else written
    state = (resumed.optimizers[0] if as_set else resumed).state_dict()["state"][0]
    assert torch.equal(state["sum"], saved["state"][0]["sum"])
