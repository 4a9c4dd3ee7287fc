"""``count_ops`` counts, on the CPU, each op that makes the host wait for a CUDA device
(``host_syncs``), and not their sync-free forms."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from foldexp.bench.host_syncs import where_syncs
from foldexp.bench.overhead import count_ops

x = torch.arange(6.0) - 2
mask = x > 0
counts = torch.tensor([1, 0, 2])
rows = torch.sparse_coo_tensor(
    counts[None], x[:3], (6,), check_invariants=True
)  # a sparse gradient, not coalesced

WAITS: dict[str, Callable[[], Any]] = {
    "item": lambda: x.sum().item(),
    "bool": lambda: bool(mask.any()),
    "mask index": lambda: x[mask],
    "mask assignment": lambda: x.clone().index_put_((mask,), torch.tensor(0.0)),
    "nonzero": lambda: mask.nonzero(),
    "where(cond)": lambda: torch.where(mask),
    "masked_select": lambda: x.masked_select(mask),
    "unique": lambda: torch.unique(counts),
    "coalesce": lambda: rows.coalesce(),
    "repeat_interleave": lambda: torch.repeat_interleave(counts),
    "bincount": lambda: torch.bincount(counts),
    "equal": lambda: torch.equal(x, x),
}
FREE: dict[str, Callable[[], Any]] = {
    "masked sum": lambda: torch.where(mask, x, 0.0).sum(),
    "index by ids": lambda: x[counts],
    "index_select": lambda: x.index_select(0, counts),
    "repeat_interleave with output_size": lambda: torch.repeat_interleave(counts, output_size=3),
    "isfinite": lambda: torch.isfinite(x).all(),
}


@pytest.mark.parametrize("name", WAITS)
def test_an_op_that_waits_on_cuda_is_counted(name: str) -> None:
    assert count_ops(WAITS[name]).syncs >= 1
    assert sum(where_syncs(WAITS[name]).values()) >= 1


@pytest.mark.parametrize("name", FREE)
def test_its_sync_free_form_is_not(name: str) -> None:
    assert count_ops(FREE[name]).syncs == 0


def test_where_names_the_line() -> None:
    line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
    where = where_syncs(lambda: x[mask])
    (called,) = where
    assert called.startswith(f"index.Tensor at {Path(__file__).name}:{line} <lambda> < ")
