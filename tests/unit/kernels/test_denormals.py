"""``flush_denormals``: denormal floats read and written as zero on every thread torch uses."""

from __future__ import annotations

import pytest
import torch

from foldexp.kernels import flush_denormals
from foldexp.kernels.native import load_kernels


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    flush_denormals(False)
    torch.set_num_threads(before)


@pytest.mark.skipif(not torch.set_flush_denormal(False), reason="no flush-to-zero on this CPU")
@pytest.mark.skipif(load_kernels() is None, reason="no C++ compiler for the native library")
def test_every_thread_flushes_and_restores(two_threads):
    """``torch.set_flush_denormal`` alone reaches the calling thread only: an op split across
    two threads would flush half of its elements."""
    flush_denormals(False)  # an earlier run in this process may have left them flushed
    tiny = torch.full((200_000,), 1e-39)  # denormal in float32, made before flushing
    assert tiny.ne(0).all()
    assert flush_denormals(True)
    assert (tiny * 1.0).eq(0).all()
    assert flush_denormals(False)
    assert (tiny * 1.0).ne(0).all()
