"""The DyNet peer of ``bench=peers``: the same binary Tree-LSTM in DyNet (PyPI ``dynet38``).

Loaded by ``peer_worker.py`` from its file path, so the process never imports torch (DyNet and
torch each bring their own math libraries and thread pools). DyNet reads its configuration --
autobatching included -- once, before ``import dynet``; that is why every peer runs in its own
process. ``autobatch`` 0 is DyNet's plain per-node execution, 1 and 2 its two automatic batching
strategies (agenda-based and depth-based; Neubig et al. 2017, "On-the-fly operation batching").

The model matches ``peer_torch.TreeLSTMParams``: ``TreeLSTMLeaf`` (gates i, o, u from the word)
and ``BinaryTreeLSTMCell`` (gates i, f_l, f_r, o, u from ``[h_l; h_r]``), then a linear
classifier on the root and the mean cross-entropy over the batch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["setup"]


class Unavailable(Exception):
    """DyNet is not installed or cannot be imported here."""


def setup(name: str, params: dict[str, Any], trees: list, labels: list[int]) -> tuple:
    """``name`` is ``dynet`` (autobatch 0), ``dynet_ab1`` or ``dynet_ab2``."""
    autobatch = {"dynet": 0, "dynet_ab1": 1, "dynet_ab2": 2}[name]
    try:
        import dynet_config

        dynet_config.set(mem=str(params.get("dynet_mem", 1536)), random_seed=1, autobatch=autobatch)
        import dynet as dy
    except ImportError as e:
        raise Unavailable(f"DyNet is not installed ({e}); pip install dynet38") from None

    e_size, h, v, k = params["embed"], params["hidden"], params["vocab"], params["classes"]
    pc = dy.ParameterCollection()
    glorot, zero = dy.GlorotInitializer(), dy.ConstInitializer(0.0)
    lookup = pc.add_lookup_parameters((v, e_size), init=dy.NormalInitializer(0.0, 1.0 / e_size))
    w_leaf, b_leaf = (
        pc.add_parameters((3 * h, e_size), init=glorot),
        pc.add_parameters(3 * h, init=zero),
    )
    w_cell, b_cell = (
        pc.add_parameters((5 * h, 2 * h), init=glorot),
        pc.add_parameters(5 * h, init=zero),
    )
    w_out, b_out = pc.add_parameters((k, h), init=glorot), pc.add_parameters(k, init=zero)

    def state(node: Any) -> tuple[Any, Any]:
        if len(node) == 1:
            g = dy.affine_transform([b_leaf, w_leaf, lookup[node[0]]])
            i, o, u = (dy.pick_range(g, j * h, (j + 1) * h) for j in range(3))
            c = dy.cmult(dy.logistic(i), dy.tanh(u))
            return dy.cmult(dy.logistic(o), dy.tanh(c)), c
        (hl, cl), (hr, cr) = state(node[0]), state(node[1])
        g = dy.affine_transform([b_cell, w_cell, dy.concatenate([hl, hr])])
        i, fl, fr, o, u = (dy.pick_range(g, j * h, (j + 1) * h) for j in range(5))
        c = (
            dy.cmult(dy.logistic(i), dy.tanh(u))
            + dy.cmult(dy.logistic(fl), cl)
            + dy.cmult(dy.logistic(fr), cr)
        )
        return dy.cmult(dy.logistic(o), dy.tanh(c)), c

    def step() -> dict[str, Any]:
        assert pc is not None  # the closure keeps the collection alive: it owns the weights
        dy.renew_cg()
        losses = []
        for tree, label in zip(trees, labels):
            logits = dy.affine_transform([b_out, w_out, state(tree)[0]])
            losses.append(dy.pickneglogsoftmax(logits, label))
        loss = dy.esum(losses)
        value = loss.value() / len(losses)  # forward (autobatched when on)
        loss.backward()
        return {"loss": value}

    step_fn: Callable[[], dict[str, Any]] = step
    return step_fn, {"version": f"dynet {getattr(dy, '__version__', '2.x')} (dynet38)"}
