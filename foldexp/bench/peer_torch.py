"""The PyTorch-based peers of ``bench=peers``: one binary Tree-LSTM, five ways of batching it.

Every implementation computes the same thing on the same trees -- leaf ``(h, c)`` from the
word's embedding, internal nodes by ``BinaryTreeLSTMCell``, logits from the root's ``h``, mean
cross-entropy, backward -- with the same modules, so only the batching differs:

- ``engine``: foldexp (``Compiler.build`` traces and schedules, ``run`` executes); also with
  per-input traces cached (``engine_cached``), in DyNet's agenda order (``engine_agenda``), and
  without merging equal invocations (``engine_unmerged``: every leaf computed, as every peer
  does; by default a word's leaf state is computed once per batch), with the dense layers
  forced through torch's default MKL matmuls (``engine_mkl``) or through oneDNN
  (``engine_onednn``; every other peer takes this CPU's default route,
  ``foldexp/kernels/dense.py``), and with a user's own cells written with plain ``nn.Linear``
  (``engine_plain``);
- ``loop``: plain PyTorch, each tree evaluated node by node (no batching at all), with the
  model's cells (fused, as every peer's); ``loop_plain``: the same with the user's plain cells,
  the per-tree baseline of ``engine_plain`` (the same cells, batched or not);
- ``level``: hand-written level-by-level batching: number the nodes of the whole batch by
  height, then one cell call per height, children gathered from the levels below;
- ``torchfold``: torchfold 0.1.0 (``Fold.add`` per node, ``Fold.apply``), with a shim for the
  ``torch.tensor._TensorBase`` name it reads, which modern torch no longer has;
- ``dgl``: DGL's ``prop_nodes`` over each frontier above the leaves (as ``prop_nodes_topo``
  does, minus the leaf frontier, whose states are computed before propagation), graph build
  included. DGL 2.1 ships no graphbolt library for recent torch; graphbolt (sampling pipelines,
  unused here) is replaced by an empty stand-in module before ``import dgl``.

``setup(name, params, trees, labels)`` returns ``(step, meta)``: ``step()`` runs one batch and
returns extra numbers to record. Raises ``Unavailable`` when a library cannot be imported.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from foldexp.bench.dgl_import import Unavailable, import_dgl
from foldexp.bench.trees import number_batch
from foldexp.kernels import Linear, set_onednn_enabled
from foldexp.models.cells import BinaryTreeLSTMCell, TreeLSTMLeaf

__all__ = ["Unavailable", "TreeLSTMParams", "plain_params", "setup", "IMPLS"]


class TreeLSTMParams(nn.Module):
    """The shared model: embedding, leaf cell, binary cell (``foldexp.models.cells``),
    classifier."""

    def __init__(self, vocab: int, embed: int, hidden: int, classes: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.leaf = TreeLSTMLeaf(embed, hidden)
        self.cell = BinaryTreeLSTMCell(hidden)
        self.out = Linear(hidden, classes)

    def word(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.leaf(self.embed(ids))


Step = Callable[[], dict[str, Any]]


def _engine(
    m: TreeLSTMParams,
    trees: list,
    labels: torch.Tensor,
    cache_traces: bool = False,
    schedule_order: str = "depth",
    merge_duplicates: bool = True,
    cache_plans: bool | None = None,
) -> tuple[Step, dict]:
    import foldexp
    import foldexp.blocks as fb
    from foldexp import Compiler
    from foldexp.models.tree_lstm import binary_tree, word_leaf

    tree = binary_tree(word_leaf(m.embed, m.leaf), m.cell)  # binary_tree_lstm with m's modules
    model = Compiler(
        tree >> fb.GetItem(0) >> fb.Function(m.out),
        cache_traces=cache_traces,
        schedule_order=schedule_order,
        merge_duplicates=merge_duplicates,
        cache_plans=cache_plans,
    )

    def step() -> dict[str, Any]:
        plan = model.build(trees)
        loss = F.cross_entropy(model.run(plan), labels)
        loss.backward()
        s = model.last_stats
        return {
            "build_s": s["trace"] + s["schedule"],
            "calls": s["calls"],
            "merged": s["merged"],
            "loss": loss.item(),
        }

    return step, {"version": f"foldexp {foldexp.__version__}"}


def _loop(m: TreeLSTMParams, trees: list, labels: torch.Tensor) -> tuple[Step, dict]:
    def state(node: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if len(node) == 1:
            return m.word(torch.tensor([node[0]], device=m.out.weight.device))
        return m.cell(state(node[0]), state(node[1]))

    def step() -> dict[str, Any]:
        logits = m.out(torch.cat([state(t)[0] for t in trees]))
        loss = F.cross_entropy(logits, labels)
        loss.backward()
        return {"loss": loss.item()}

    return step, {"version": f"torch {torch.__version__}"}


def _level(m: TreeLSTMParams, trees: list, labels: torch.Tensor) -> tuple[Step, dict]:
    dev = m.out.weight.device  # the index tensors go where the model is

    def step() -> dict[str, Any]:
        # Number every node of the batch by height: leaves first, then height 1, 2, ...
        words, by_height, root_ids = number_batch(trees)
        # The math: one leaf call, then one cell call per height.
        h, c = m.word(torch.tensor(words, device=dev))
        hs, cs = [h], [c]
        for pairs in by_height:
            idx = torch.tensor(pairs, device=dev).T.reshape(-1)
            h_all, c_all = torch.cat(hs), torch.cat(cs)
            hl, hr = h_all[idx].chunk(2)
            cl, cr = c_all[idx].chunk(2)
            h, c = m.cell((hl, cl), (hr, cr))
            hs.append(h)
            cs.append(c)
        h_all = torch.cat(hs)
        root_rows = torch.tensor(root_ids, device=dev)
        loss = F.cross_entropy(m.out(h_all[root_rows]), labels)
        loss.backward()
        return {"calls": 1 + len(by_height), "loss": loss.item()}

    return step, {"version": f"torch {torch.__version__}"}


def _torchfold(m: TreeLSTMParams, trees: list, labels: torch.Tensor) -> tuple[Step, dict]:
    try:
        import torchfold
        import torchfold.torchfold as tf_impl
    except ImportError as e:
        raise Unavailable(f"torchfold is not installed ({e}); pip install torchfold") from None

    class _TorchShim(types.ModuleType):
        def __getattr__(self, name: str) -> Any:
            return getattr(torch, name)

    shim = _TorchShim("torch")
    shim.tensor = types.SimpleNamespace(_TensorBase=torch.Tensor)  # type: ignore[attr-defined]
    tf_impl.torch = shim  # torchfold reads torch.tensor._TensorBase, gone from modern torch

    class Ops(nn.Module):  # torchfold calls ops by name on a module, with batched arguments
        def leaf(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return m.word(ids)

        def node(self, hl: torch.Tensor, cl: torch.Tensor, hr: torch.Tensor, cr: torch.Tensor):
            return m.cell((hl, cl), (hr, cr))

    ops = Ops()

    def encode(fold: Any, node: Any) -> Any:
        if len(node) == 1:
            return fold.add("leaf", node[0]).split(2)
        (hl, cl), (hr, cr) = encode(fold, node[0]), encode(fold, node[1])
        return fold.add("node", hl, cl, hr, cr).split(2)

    def step() -> dict[str, Any]:
        fold = torchfold.Fold()
        roots = [encode(fold, t)[0] for t in trees]
        (h,) = fold.apply(ops, [roots])
        loss = F.cross_entropy(m.out(h), labels)
        loss.backward()
        return {"loss": loss.item()}

    return step, {"version": "torchfold 0.1.0"}


def _dgl(m: TreeLSTMParams, trees: list, labels: torch.Tensor) -> tuple[Step, dict]:
    import warnings

    warnings.filterwarnings("ignore")  # DGL warns about its missing torch adapter on import
    dgl = import_dgl()

    def reduce(nodes: Any) -> dict[str, torch.Tensor]:
        h, c = nodes.mailbox["h"], nodes.mailbox["c"]  # (n, 2, hidden): left, right by edge id
        return dict(zip(("h", "c"), m.cell((h[:, 0], c[:, 0]), (h[:, 1], c[:, 1]))))

    def message(edges: Any) -> dict[str, torch.Tensor]:
        return {"h": edges.src["h"], "c": edges.src["c"]}

    def step() -> dict[str, Any]:
        src: list[int] = []
        dst: list[int] = []
        words: list[int] = []
        is_leaf: list[bool] = []
        roots: list[int] = []
        for t in trees:
            stack: list[tuple[Any, int]] = [(t, -1)]
            while stack:
                node, parent = stack.pop()
                me = len(words)
                words.append(node[0] if len(node) == 1 else 0)
                is_leaf.append(len(node) == 1)
                if parent < 0:
                    roots.append(me)
                else:
                    src.append(me)
                    dst.append(parent)
                if len(node) == 2:
                    stack += [(node[1], me), (node[0], me)]
        # Edges sorted so each parent's left child comes first in its mailbox.
        order = sorted(range(len(src)), key=lambda e: (dst[e], src[e]))
        g = dgl.graph(([src[e] for e in order], [dst[e] for e in order]), num_nodes=len(words))
        leaf_ids = torch.tensor(is_leaf).nonzero().squeeze(1)
        hl, cl = m.word(torch.tensor(words)[leaf_ids])
        n, hidden = len(words), hl.shape[1]
        g.ndata["h"] = torch.zeros(n, hidden).index_copy(0, leaf_ids, hl)
        g.ndata["c"] = torch.zeros(n, hidden).index_copy(0, leaf_ids, cl)
        frontiers = list(dgl.topological_nodes_generator(g))[1:]
        dgl.prop_nodes(g, frontiers, message, reduce, None)
        loss = F.cross_entropy(m.out(g.ndata["h"][torch.tensor(roots)]), labels)
        loss.backward()
        return {"calls": len(frontiers) + 1, "loss": loss.item()}

    return step, {"version": f"dgl {dgl.__version__}"}


def _engine_cached(m: TreeLSTMParams, trees: list, labels: torch.Tensor) -> tuple[Step, dict]:
    # The same trees come back every step, as a dataset's do every epoch: each tree is traced
    # once (during warm-up) and every step still concatenates the traces and schedules. An
    # epoch's shuffled batches are new each time, so the plan cache, which would serve this
    # repeated batch whole, is kept out.
    return _engine(m, trees, labels, cache_traces=True, cache_plans=False)


def _engine_agenda(m: TreeLSTMParams, trees: list, labels: torch.Tensor) -> tuple[Step, dict]:
    # DyNet's agenda order instead of depth: the classifier over roots of different heights
    # becomes one call instead of one per height.
    return _engine(m, trees, labels, schedule_order="agenda")


def _engine_unmerged(m: TreeLSTMParams, trees: list, labels: torch.Tensor) -> tuple[Step, dict]:
    # Every invocation computed, equal ones too: the same arithmetic as every other peer.
    return _engine(m, trees, labels, merge_duplicates=False)


def _engine_mkl(m: TreeLSTMParams, trees: list, labels: torch.Tensor) -> tuple[Step, dict]:
    # Dense layers through torch's default CPU matmuls (MKL), whatever this CPU's default route
    # (``foldexp/kernels/dense.py``); with ``engine_onednn``, both routes side by side.
    set_onednn_enabled(False)
    return _engine(m, trees, labels)


def _engine_onednn(m: TreeLSTMParams, trees: list, labels: torch.Tensor) -> tuple[Step, dict]:
    # Dense layers through oneDNN, whatever this CPU's default route.
    set_onednn_enabled(True)
    return _engine(m, trees, labels)


class _PlainLeaf(nn.Module):
    """``TreeLSTMLeaf`` as a user writes it -- ``nn.Linear`` and plain torch ops -- sharing the
    model's parameters."""

    def __init__(self, leaf: nn.Module) -> None:
        super().__init__()
        self.gates = nn.Linear(leaf.gates.in_features, leaf.gates.out_features)
        self.gates.weight, self.gates.bias = leaf.gates.weight, leaf.gates.bias

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        i, o, u = self.gates(x).chunk(3, dim=1)
        c = torch.sigmoid(i) * torch.tanh(u)
        return torch.sigmoid(o) * torch.tanh(c), c


class _PlainCell(nn.Module):
    """``BinaryTreeLSTMCell`` as a user writes it, sharing the model's parameters."""

    def __init__(self, cell: nn.Module) -> None:
        super().__init__()
        self.gates = nn.Linear(cell.gates.in_features, cell.gates.out_features)
        self.gates.weight, self.gates.bias = cell.gates.weight, cell.gates.bias

    def forward(self, left: tuple, right: tuple) -> tuple[torch.Tensor, torch.Tensor]:
        (hl, cl), (hr, cr) = left, right
        i, fl, fr, o, u = self.gates(torch.cat([hl, hr], dim=1)).chunk(5, dim=1)
        c = torch.sigmoid(i) * torch.tanh(u) + torch.sigmoid(fl) * cl + torch.sigmoid(fr) * cr
        return torch.sigmoid(o) * torch.tanh(c), c


class _PlainParams(nn.Module):
    """``TreeLSTMParams`` as a user writes it: the same parameters behind plain ``nn.Linear``
    layers and plain torch ops."""

    def __init__(self, m: TreeLSTMParams) -> None:
        super().__init__()
        self.embed, self.leaf, self.cell = m.embed, _PlainLeaf(m.leaf), _PlainCell(m.cell)
        self.out = nn.Linear(m.out.in_features, m.out.out_features)
        self.out.weight, self.out.bias = m.out.weight, m.out.bias

    def word(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.leaf(self.embed(ids))


def plain_params(m: TreeLSTMParams) -> nn.Module:
    """``m``'s parameters behind a user's own plain cells (``engine_plain``'s model)."""
    return _PlainParams(m)


def _engine_plain(m: TreeLSTMParams, trees: list, labels: torch.Tensor) -> tuple[Step, dict]:
    # A user's own cells (plain nn.Linear, no foldexp layer) through the same Compiler: whatever
    # makes the engine fast must reach ops it did not write.
    return _engine(_PlainParams(m), trees, labels)  # type: ignore[arg-type]


def _loop_plain(m: TreeLSTMParams, trees: list, labels: torch.Tensor) -> tuple[Step, dict]:
    return _loop(_PlainParams(m), trees, labels)  # type: ignore[arg-type]


IMPLS = {
    "engine": _engine,
    "engine_plain": _engine_plain,
    "engine_cached": _engine_cached,
    "engine_agenda": _engine_agenda,
    "engine_unmerged": _engine_unmerged,
    "engine_mkl": _engine_mkl,
    "engine_onednn": _engine_onednn,
    "loop": _loop,
    "loop_plain": _loop_plain,
    "level": _level,
    "torchfold": _torchfold,
    "dgl": _dgl,
}


def setup(name: str, params: dict[str, Any], trees: list, labels: list[int]) -> tuple[Step, dict]:
    """Builds the model and returns ``(step, meta)`` for implementation ``name``."""
    torch.manual_seed(params.get("seed", 0))
    m = TreeLSTMParams(params["vocab"], params["embed"], params["hidden"], params["classes"])
    step, meta = IMPLS[name](m, trees, torch.tensor(labels))

    def zeroed_step() -> dict[str, Any]:
        m.zero_grad(set_to_none=True)
        return step()

    return zeroed_step, meta
