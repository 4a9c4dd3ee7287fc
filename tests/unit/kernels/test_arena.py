"""Scratch blocks for the Triton route's results (``foldexp/kernels/arena.py``): regions that do
not overlap, start at multiples of 128 bytes into their block, come from one allocation once a
pass has run before, and from ``new_empty`` outside an arena or for another dtype."""

from __future__ import annotations

import torch

from foldexp.bench.overhead import count_ops
from foldexp.kernels.arena import scratch_arena, scratch_empty

SIZES = [5, 640, 1, 3000, 77]


def _take_all(like: torch.Tensor) -> list[torch.Tensor]:
    return [scratch_empty(n, like) for n in SIZES]


def test_regions_are_aligned_apart_and_writable() -> None:
    like = torch.empty(1)
    with scratch_arena("test.regions"):
        parts = _take_all(like)
        for k, p in enumerate(parts):
            p.fill_(k)
    assert [p.numel() for p in parts] == SIZES
    # 128-byte steps from their block's start (CUDA's allocator aligns blocks to 512 bytes)
    assert all(p.storage_offset() * p.element_size() % 128 == 0 for p in parts)
    for k, p in enumerate(parts):  # nothing written over another's region
        assert p.eq(k).all()
    spans = sorted((p.data_ptr(), p.data_ptr() + 4 * p.numel()) for p in parts)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))


def test_a_pass_run_before_allocates_once() -> None:
    like = torch.empty(1)
    with scratch_arena("test.once"):
        first = count_ops(lambda: _take_all(like))
    with scratch_arena("test.once"):
        again = count_ops(lambda: _take_all(like))
    assert first.ops["new_empty"] > 1  # grown as asked
    assert again.ops["new_empty"] == 1  # sized by the pass before


def test_outside_an_arena_or_for_another_dtype_it_allocates() -> None:
    like = torch.empty(1)
    assert count_ops(lambda: scratch_empty(10, like)).ops["new_empty"] == 1
    with scratch_arena("test.dtype"):
        scratch_empty(10, like)
        other = scratch_empty(10, torch.empty(1, dtype=torch.float64))
        assert other.dtype == torch.float64 and other.numel() == 10
        with scratch_arena("test.inner"):  # nested: the inner one serves, then the outer again
            inner = scratch_empty(10, like)
        outer = scratch_empty(10, like)
    assert inner.untyped_storage().data_ptr() != outer.untyped_storage().data_ptr()


def test_a_block_holds_at_most_its_cap(monkeypatch) -> None:
    from foldexp.kernels import arena

    monkeypatch.setattr(arena, "_MAX_BLOCK_BYTES", 4 * 1024)  # 1,024 floats
    like = torch.empty(1)
    for _ in range(2):  # the second pass starts from the first's size, capped
        with scratch_arena("test.cap"):
            parts = [scratch_empty(n, like) for n in (600, 600, 3000, 10)]
        blocks = {p.untyped_storage().data_ptr(): p.untyped_storage().nbytes() for p in parts}
        # 3,000 floats get a block of their own; no other block is larger than the cap
        assert sorted(blocks.values())[-1] == 4 * 3000
        assert all(size <= 4 * 1024 for size in sorted(blocks.values())[:-1])


def test_the_triton_wrappers_parts_start_128_bytes_apart() -> None:
    from foldexp.kernels.treelstm_triton import _parts

    like = torch.empty(1)
    with scratch_arena("test.parts"):
        dz, dcl, dcr = _parts(like, 3, (5 * 7, 7, 7))  # 105 and 21 floats: not multiples of 32
    assert [t.shape for t in (dz, dcl, dcr)] == [(3, 35), (3, 7), (3, 7)]
    assert [t.storage_offset() % 32 for t in (dz, dcl, dcr)] == [0, 0, 0]
    assert dz.untyped_storage().data_ptr() == dcr.untyped_storage().data_ptr()  # one block
    assert not dz._is_view() and dz.is_contiguous()  # plain tensors for autograd
