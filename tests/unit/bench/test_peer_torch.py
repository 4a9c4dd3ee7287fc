"""The PyTorch peers of ``bench=peers`` agree on the loss; ``engine_mkl`` switches oneDNN off."""

from __future__ import annotations

import numpy as np
import pytest

from foldexp.bench import peer_torch
from foldexp.bench.trees import make_trees
from foldexp.kernels import MIN_ROWS, onednn_available, onednn_enabled, set_onednn_enabled


@pytest.mark.skipif(not onednn_available(), reason="torch built without oneDNN")
@pytest.mark.usefixtures("restore_onednn")
def test_peers_agree_and_engine_mkl_uses_default_matmuls() -> None:
    # enough trees that the leaf and lowest cell levels reach the oneDNN route
    trees = make_trees(2 * MIN_ROWS, 8, 50, 0)
    labels = np.random.default_rng(1).integers(5, size=len(trees)).tolist()
    params = {"vocab": 50, "embed": 16, "hidden": 16, "classes": 5, "seed": 0}
    losses = {}
    set_onednn_enabled(True)  # the route on, whatever this CPU's default
    for name in ["engine", "engine_plain", "level", "loop", "loop_plain", "engine_mkl"]:
        step, _ = peer_torch.setup(name, params, trees, labels)
        losses[name] = step()["loss"]
        assert onednn_enabled() is (name != "engine_mkl")  # engine_mkl runs last
    assert max(losses.values()) - min(losses.values()) < 1e-5, losses


def test_level_numbers_nodes_shared_between_and_within_trees() -> None:
    """A node object met twice (one leaf under both children, a subtree in two trees) gets one
    row per meeting, as ``words`` does: ``level``'s loss stays ``loop``'s."""
    leaf, sub = (9,), ((1,), (2,))
    trees = [(leaf, leaf), (sub, (3,)), ((4,), sub), sub]
    params = {"vocab": 50, "embed": 5, "hidden": 5, "classes": 3, "seed": 0}
    losses = {
        n: peer_torch.setup(n, params, trees, [0, 1, 2, 1])[0]()["loss"] for n in ("loop", "level")
    }
    assert abs(losses["loop"] - losses["level"]) < 1e-5, losses
