"""Every kernel test leaves the kernels' switch on its default and torch's thread count as it
found them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from foldexp.kernels import treelstm as fused


@pytest.fixture(autouse=True)
def restore_switch() -> Iterator[None]:
    threads = torch.get_num_threads()
    yield
    fused.set_fused_cells_enabled(None)
    torch.set_num_threads(threads)
