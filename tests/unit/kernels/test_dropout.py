"""``foldexp.kernels.dropout``: bit for bit ``F.dropout`` (values, gradients, the generator's
state after the draw) where the native kernel draws the noise, and torch's own dropout wherever
it cannot."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from foldexp.blocks._ops import Op
from foldexp.kernels import Dropout, dropout, native
from foldexp.kernels import dropout_noise as fast
from foldexp.kernels import treelstm as fused
from foldexp.types import TensorType

pytestmark = pytest.mark.skipif(
    native.load_kernels() is None, reason="no C++ compiler: the native kernels cannot build"
)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int32) if t.dtype == torch.float32 else t.view(torch.int64)


def _both(fn, x, p, **kw):
    """``fn`` and ``F.dropout`` from the same generator state: outputs and states after."""
    start = torch.get_rng_state()
    got = fn(x, p, **kw)
    got_state = torch.get_rng_state()
    torch.set_rng_state(start)
    want = F.dropout(x, p, **kw)
    return got, want, got_state, torch.get_rng_state()


def test_the_kernel_reproduces_this_torch():
    assert fast.exact_noise_available()


@pytest.mark.parametrize("n", [1, 2, 311, 623, 624, 625, 1247, 1248, 5000, 70_001])
@pytest.mark.parametrize("p", [1e-6, 0.2, 0.5, 0.9, 1 - 1e-6])
def test_values_and_generator_state_equal_torchs(n, p):
    """Sizes around the twister's 624-word blocks and the kernel's 2,048-element chunks, rates
    near both ends: the same masks, and the generator where torch leaves it."""
    torch.manual_seed(n)
    torch.rand(n % 97)  # start somewhere inside a block
    x = torch.randn(n)
    called = []
    real = fast._draw_noise
    fast._draw_noise = lambda *a: called.append(1) or real(*a)
    try:
        got, want, got_state, want_state = _both(dropout, x, p, training=True)
    finally:
        fast._draw_noise = real
    assert called, "the native route did not run"
    assert torch.equal(_bits(got), _bits(want))
    assert torch.equal(got_state, want_state)


def test_a_fresh_seed_and_a_run_of_calls_follow_torch():
    """A generator just seeded (its first draw twists) and many calls in a row stay in step."""
    x = torch.randn(40, 150)
    torch.manual_seed(7)
    ours = [dropout(x, 0.3) for _ in range(12)]
    torch.manual_seed(7)
    theirs = [F.dropout(x, 0.3) for _ in range(12)]
    for a, b in zip(ours, theirs):
        assert torch.equal(_bits(a), _bits(b))


def test_gradients_equal_torchs():
    x = torch.randn(33, 17, requires_grad=True)
    seed = torch.get_rng_state()
    (dropout(x, 0.4) * torch.arange(17.0)).sum().backward()
    ours, x.grad = x.grad, None
    torch.set_rng_state(seed)
    (F.dropout(x, 0.4) * torch.arange(17.0)).sum().backward()
    assert torch.equal(_bits(ours), _bits(x.grad))


def test_inplace_two_threads_and_the_module():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        x = torch.randn(3000)
        got, want, s1, s2 = _both(lambda a, p, **kw: dropout(a.clone(), p, **kw), x, 0.25,
                                  training=True, inplace=True)  # fmt: skip
        assert torch.equal(_bits(got), _bits(want)) and torch.equal(s1, s2)
    finally:
        torch.set_num_threads(before)
    module = Dropout(0.25)
    assert isinstance(module, torch.nn.Dropout) and module.state_dict() == {}
    got, want, _, _ = _both(lambda a, p: module(a), x, 0.25)
    assert torch.equal(_bits(got), _bits(want))
    module.eval()
    assert module(x) is x
    op = Op(module, TensorType((3000,)), TensorType((3000,)), module, "drop")
    assert not op.is_random() and (module.train() or op.is_random())


@pytest.mark.parametrize(
    "case",
    ["float64", "transposed", "empty", "p=0", "p=1", "eval", "switch off", "compiling"],
)
def test_where_the_kernel_cannot_run_torchs_dropout_does(case):
    """Each case equals ``F.dropout`` and never reaches the native draw."""
    x = torch.randn(50, 40)
    p, kw = 0.3, {"training": True}
    if case == "float64":
        x = x.double()
    elif case == "transposed":
        x = x.t()
    elif case == "empty":
        x = x[:0]
    elif case in ("p=0", "p=1"):
        p = float(case[-1])
    elif case == "eval":
        kw = {"training": False}
    elif case == "switch off":
        fused.set_fused_cells_enabled(False)
    called = []
    real = fast._draw_noise
    fast._draw_noise = lambda *a: called.append(1) or real(*a)
    try:
        if case == "compiling":
            with mock.patch("torch.compiler.is_compiling", lambda: True):
                got, want, s1, s2 = _both(dropout, x, p, **kw)
        else:
            got, want, s1, s2 = _both(dropout, x, p, **kw)
    finally:
        fast._draw_noise = real
    assert not called
    assert torch.equal(_bits(got), _bits(want)) and torch.equal(s1, s2)


def test_a_torch_that_draws_otherwise_keeps_its_own_dropout(monkeypatch):
    """The probe compares with torch's dropout: a kernel drawing anything else is never used,
    and probing leaves the generator as it was."""
    monkeypatch.setattr(fast, "_exact", None)
    real = fast._draw_noise

    def off_by_one(x, keep):
        noise = real(x, keep)
        noise[0] = 1.0 / keep - noise[0]  # one element kept where torch drops it, or back
        return noise

    monkeypatch.setattr(fast, "_draw_noise", off_by_one)
    state = torch.get_rng_state()
    assert not fast.exact_noise_available()
    assert torch.equal(torch.get_rng_state(), state)
    x = torch.randn(2000)
    got, want, s1, s2 = _both(dropout, x, 0.5, training=True)
    assert torch.equal(_bits(got), _bits(want)) and torch.equal(s1, s2)
    monkeypatch.setattr(fast, "_exact", None)  # the next caller probes the real kernel again


def test_a_float32_rate_is_taken_as_torch_takes_it():
    """torch reads ``p`` as a double: ``1 - p`` in float32 would move the keep threshold, and a
    uniform between the two thresholds would be kept by one route and dropped by the other."""
    p = np.float32(0.1)
    x = torch.ones(50_000)
    for rate in (p, torch.tensor(0.1, dtype=torch.float32)):
        got, want, s1, s2 = _both(dropout, x, rate, training=True)
        assert torch.equal(_bits(got), _bits(want)) and torch.equal(s1, s2)


def test_a_draw_by_another_thread_meanwhile_is_kept(monkeypatch):
    """The state is read again before it is written: a draw made in between is not undone, and
    torch's dropout then draws from where that draw left the generator."""
    real_kernels = native.load_kernels()

    class Meddling:
        def dropout_noise(self, *args):
            rc = real_kernels.dropout_noise(*args)
            torch.rand(3)  # as another thread would, while the kernel ran
            return rc

    monkeypatch.setattr(fast, "load_kernels", lambda: Meddling())
    x = torch.randn(1000)
    start = torch.get_rng_state()
    got = dropout(x, 0.5)
    after = torch.get_rng_state()
    torch.set_rng_state(start)
    torch.rand(3)
    want = F.dropout(x, 0.5)
    assert torch.equal(_bits(got), _bits(want)) and torch.equal(after, torch.get_rng_state())


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch 2.13's jit.script
def test_modes_scripting_and_other_default_devices():
    """A ``__torch_function__`` mode sees ``F.dropout``; ``jit.script`` compiles the module; a
    first call under another default device or dtype still probes on CPU float32."""
    seen = []

    class Spy(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(func)
            return func(*args, **(kwargs or {}))

    x = torch.randn(200)
    with Spy():
        dropout(x, 0.3)
    assert F.dropout in seen
    scripted = torch.jit.script(torch.nn.Sequential(Dropout(0.3)))
    got, want, _, _ = _both(lambda a, p: scripted(a), x, 0.3)
    assert torch.equal(_bits(got), _bits(want))
    old = fast._exact
    fast._exact = None
    try:
        with torch.device("meta"):
            assert fast.exact_noise_available()
        torch.set_default_dtype(torch.float64)
        fast._exact = None
        assert fast.exact_noise_available()
    finally:
        torch.set_default_dtype(torch.float32)
        fast._exact = old


def test_a_state_torch_would_read_past_its_words_is_left_to_torch():
    """``left`` and ``next`` that do not add up to 625 (a hand-made state) are refused by the
    kernel, state untouched."""
    state = torch.get_rng_state().clone()
    state[8:12] = torch.tensor([624], dtype=torch.int32).view(torch.uint8)
    state[16:24] = torch.tensor([624], dtype=torch.int64).view(torch.uint8)
    before = state.clone()
    noise = torch.empty(10)
    assert native.load_kernels().dropout_noise(10, 0.5, noise.data_ptr(), state.data_ptr()) == -1
    assert torch.equal(state, before)
