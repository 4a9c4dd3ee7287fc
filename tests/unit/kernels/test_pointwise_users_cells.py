"""Cells people wrote in public repositories, re-typed here in our own words with the op pattern
each original uses, run by the engine over trees or sequences: batched == eager (values and
gradients), and what the pointwise fusion (``kernels/pointwise_graph.py``) made of each body —
fused where its runs are ones the generated kernels do, as written where they cannot be."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import foldexp.blocks as fb
from foldexp import Compiler
from foldexp.executor import calls as executor
from foldexp.kernels import native
from foldexp.kernels.pointwise_code import RegionCall
from foldexp.models.tree_lstm import binary_tree
from foldexp.testing import check_block

pytestmark = pytest.mark.skipif(
    native.load_kernels() is None, reason="no C++ compiler: no kernel can be built"
)

E, H, VOCAB = 6, 8, 20
TREES = [
    ((1,), (2,)),
    (((4,), (5,)), ((6,), (7,))),
    ((3,), ((8,), ((9,), (10,)))),
    (9,),
    (((11,), (12,)), (13,)),
]
SEQUENCES = [[1, 2, 3], [4], [5, 6, 7, 8, 9], [10, 11], [12, 13, 14, 15]]


def _regions(compiler: Compiler, module: nn.Module) -> list[list[RegionCall]]:
    """For each of ``compiler``'s ops whose body is ``module``'s, the regions of each fused mode.
    (The fusions are keyed weakly by op: the compiler must be alive.)"""
    assert compiler is not None
    found = []
    for op, fusion in executor.fusions.items():
        if op.fn is module or op.module is module:
            for body in fusion.bodies():
                found.append(
                    [] if body is None else
                    [n.target for n in body.graph.nodes if isinstance(n.target, RegionCall)]
                )  # fmt: skip
    assert found, f"the engine never ran {type(module).__name__}"
    return found


def _sizes(compiler: Compiler, module: nn.Module) -> list[list[int]]:
    """The number of ops in each region, per fused mode."""
    return [[len(r.region.instrs) for r in regions] for regions in _regions(compiler, module)]


class _Leaf(nn.Module):
    """Our own leaf (not a user's): a word's embedding to a state ``(h, c)``."""

    def __init__(self) -> None:
        super().__init__()
        self.h, self.c = nn.Linear(E, H), nn.Linear(E, H)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.tanh(self.h(x)), self.c(x)


def _tree(cell: nn.Module, leaf: nn.Module | None = None) -> fb.Block:
    """Nested-tuple trees of word ids → the root's ``h`` through ``cell`` at each pair."""
    embed = nn.Embedding(VOCAB, E)
    word = fb.GetItem(0) >> fb.Scalar("int64") >> fb.Function(embed)
    return binary_tree(word >> fb.Function(leaf or _Leaf()), cell) >> fb.GetItem(0)


def _sequence(cell: nn.Module, state: object) -> fb.Block:
    """Lists of word ids → the final state of ``cell(x, state)`` folded over their embeddings."""
    embed = nn.Embedding(VOCAB, E)
    words = fb.Map(fb.Scalar("int64") >> fb.Function(embed))
    step = fb.AllOf(fb.GetItem(1), fb.GetItem(0)) >> fb.Function(cell)  # (x, state) order
    return words >> fb.Fold(step, fb.Zeros(state))


# --- 1. nyu-mll/spinn, python/spinn/util/blocks.py: ReduceTreeLSTM and ``treelstm``. The left
# projection is added to in place (``+=``), the gates are sliced with ``[:, k*d:(k+1)*d]`` where
# ``d`` comes from ``c.size()[1]``, activations are ``F.sigmoid``/``F.tanh``, state is (c, h).


def _spinn_treelstm(c_left, c_right, gates):
    d = c_left.size()[1]

    def gate(k):
        return gates[:, k * d : (k + 1) * d]

    i, f_left, f_right, o, g = [gate(k) for k in range(5)]
    i, f_left, f_right, o = F.sigmoid(i), F.sigmoid(f_left), F.sigmoid(f_right), F.sigmoid(o)
    g = F.tanh(g)
    i_val = i * g
    c = f_left * c_left + f_right * c_right + i_val
    return c, o * F.tanh(c)


class SpinnReduce(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.left = nn.Linear(H, 5 * H)
        self.right = nn.Linear(H, 5 * H, bias=False)

    def forward(self, left, right):
        (hl, cl), (hr, cr) = left, right
        lstm_in = self.left(hl)
        lstm_in += self.right(hr)
        c, h = _spinn_treelstm(cl, cr, lstm_in)
        return h, c


def test_spinn_reduce_tree_lstm() -> None:
    torch.manual_seed(0)
    cell = SpinnReduce()
    compiler = check_block(_tree(cell), TREES)
    # ``+=`` on a projection nothing else reads is the plain sum: the whole update is one
    # region (its gate slices, with traced bounds, are read as views).
    assert _sizes(compiler, cell) == [[12]]


class WritesThroughAView(nn.Module):
    """``+=`` on a column block of a layer's output changes the output itself."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 8)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        y = self.lin(x)
        first = y[:, :4]
        first += torch.relu(x - 10)  # changes nothing while x < 10: a first batch cannot tell
        return [torch.sigmoid(y) * y + 1]


def test_an_augmented_assignment_through_a_view_runs_as_written() -> None:
    from foldexp.kernels.pointwise_graph import PointwiseFusion

    m = WritesThroughAView()
    fusion = PointwiseFusion([m])
    fusion(m, [torch.randn(3, 4)])
    assert fusion.bodies() == [None]
    later = torch.randn(3, 4) + 20
    torch.testing.assert_close(fusion(m, [later])[0], m(later)[0])


# --- 2. nathanjpaek/kb-pilot, KernelBench/KernelBench/level9/15783_TreeLSTM.py: two projections
# summed with ``+=``, ``chunk(5, 1)``, activations as methods (``a.tanh()``, ``i.sigmoid()``),
# children passed as ``(h, c)`` and indexed (``left_in[1]``).


class KernelBenchTreeLSTM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.left, self.right = nn.Linear(H, 5 * H), nn.Linear(H, 5 * H)

    def forward(self, left_in, right_in):
        lstm_in = self.left(left_in[0])
        lstm_in += self.right(right_in[0])
        a, i, f1, f2, o = lstm_in.chunk(5, 1)
        c = a.tanh() * i.sigmoid() + f1.sigmoid() * left_in[1] + f2.sigmoid() * right_in[1]
        return o.sigmoid() * c.tanh(), c


def test_kernelbench_tree_lstm() -> None:
    torch.manual_seed(1)
    cell = KernelBenchTreeLSTM()
    compiler = check_block(_tree(cell), TREES)
    assert _sizes(compiler, cell) == [[12]]  # ``+=`` on a fresh projection, as SPINN's


# --- 3. dasguptar/treelstm.pytorch, treelstm/model.py: ChildSumTreeLSTM.node_forward. The
# children are stacked and summed (``torch.sum(dim=0)``), ``torch.split(iou, iou.size(1) // 3,
# dim=1)``, ``F.sigmoid``/``F.tanh``, ``torch.mul``, the forget gate over every child with
# ``fx(inputs).repeat(len(child_h), 1)``. Every node has a word: ``(w,)`` or ``(w, l, r)``; a
# leaf has two zero children (the original gives it one: the sums are the same).


class ChildSumTreeLSTM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ioux, self.iouh = nn.Linear(E, 3 * H), nn.Linear(H, 3 * H)
        self.fx, self.fh = nn.Linear(E, H), nn.Linear(H, H)

    def node_forward(self, inputs, child_c, child_h):
        child_h_sum = torch.sum(child_h, dim=0)
        iou = self.ioux(inputs) + self.iouh(child_h_sum)
        i, o, u = torch.split(iou, iou.size(1) // 3, dim=1)
        i, o, u = F.sigmoid(i), F.sigmoid(o), F.tanh(u)
        f = F.sigmoid(self.fh(child_h) + self.fx(inputs).repeat(len(child_h), 1, 1))
        fc = torch.mul(f, child_c)
        c = torch.mul(i, u) + torch.sum(fc, dim=0)
        h = torch.mul(o, F.tanh(c))
        return c, h

    def forward(self, x, left, right):
        c, h = self.node_forward(
            x, torch.stack([left[1], right[1]]), torch.stack([left[0], right[0]])
        )
        return h, c


def _child_sum_tree(cell: nn.Module) -> fb.Block:
    embed = nn.Embedding(VOCAB, E)
    word = fb.GetItem(0) >> fb.Scalar("int64") >> fb.Function(embed)
    zero = fb.Zeros(((H,), (H,)))
    tree = fb.ForwardDeclaration(name="tree")
    leaf = fb.AllOf(word, zero, zero) >> fb.Function(cell)
    node = fb.AllOf(word, fb.GetItem(1) >> tree(), fb.GetItem(2) >> tree()) >> fb.Function(cell)
    tree.resolve_to(fb.OneOf(key_fn=len, case_blocks=[(1, leaf), (3, node)]))
    return tree() >> fb.GetItem(0)


def test_child_sum_tree_lstm() -> None:
    torch.manual_seed(2)
    cell = ChildSumTreeLSTM()
    trees = [(1, (2,), (3,)), (4, (5, (6,), (7,)), (8,)), (9,), (10, (11,), (12, (13,), (14,)))]
    compiler = check_block(_child_sum_tree(cell), trees)
    # ``len(child_h)`` of a traced value stops the trace: as written (a leaf's op and a node's).
    assert _sizes(compiler, cell) == [[], []]


# --- 4. dmlc/dgl, examples/pytorch/tree_lstm/tree_lstm.py: TreeLSTMCell (N-ary), its
# ``reduce_func`` and ``apply_node_func`` as one cell. The children's states are stacked and
# flattened with ``view``, the forget gates are a 3-D ``view`` summed over the children, the
# bias ``b_iou`` (1, 3H) is broadcast, ``th.chunk(iou, 3, 1)``.


class DglTreeLSTMCell(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.U_iou = nn.Linear(2 * H, 3 * H, bias=False)
        self.b_iou = nn.Parameter(0.1 * torch.randn(1, 3 * H))
        self.U_f = nn.Linear(2 * H, 2 * H)

    def reduce(self, child_h, child_c):
        h_cat = child_h.view(child_h.size(0), -1)
        f = torch.sigmoid(self.U_f(h_cat)).view(*child_h.size())
        return self.U_iou(h_cat), torch.sum(f * child_c, 1)

    def apply_node(self, iou, c):
        iou = iou + self.b_iou
        i, o, u = torch.chunk(iou, 3, 1)
        i, o, u = torch.sigmoid(i), torch.sigmoid(o), torch.tanh(u)
        c = i * u + c
        return o * torch.tanh(c), c

    def forward(self, left, right):
        child_h = torch.stack([left[0], right[0]], 1)
        child_c = torch.stack([left[1], right[1]], 1)
        return self.apply_node(*self.reduce(child_h, child_c))


def test_dgl_nary_tree_lstm_cell() -> None:
    torch.manual_seed(3)
    cell = DglTreeLSTMCell()
    compiler = check_block(_tree(cell), TREES)
    # ``view(*child_h.size())`` unpacks a traced size, which stops the trace: as written. (Its
    # run would be i, o, u, i * u, + c, tanh(c), o * tanh: 7 ops.)
    assert _sizes(compiler, cell) == [[]]


# --- 5. pytorch/pytorch, benchmarks/fastrnns/cells.py: ``lstm_cell``. ``torch.mm`` with
# transposed weights, both biases added one after the other, ``gates.chunk(4, 1)``, each gate
# rebound to its activation.


class FastRnnsLSTMCell(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w_ih = nn.Parameter(0.3 * torch.randn(4 * H, E))
        self.w_hh = nn.Parameter(0.3 * torch.randn(4 * H, H))
        self.b_ih = nn.Parameter(0.1 * torch.randn(4 * H))
        self.b_hh = nn.Parameter(0.1 * torch.randn(4 * H))

    def forward(self, input, hidden):
        hx, cx = hidden
        gates = torch.mm(input, self.w_ih.t()) + torch.mm(hx, self.w_hh.t()) + self.b_ih + self.b_hh
        ingate, forgetgate, cellgate, outgate = gates.chunk(4, 1)
        ingate = torch.sigmoid(ingate)
        forgetgate = torch.sigmoid(forgetgate)
        cellgate = torch.tanh(cellgate)
        outgate = torch.sigmoid(outgate)
        cy = (forgetgate * cx) + (ingate * cellgate)
        hy = outgate * torch.tanh(cy)
        return hy, cy


def test_fastrnns_lstm_cell() -> None:
    torch.manual_seed(4)
    cell = FastRnnsLSTMCell()
    compiler = check_block(_sequence(cell, ((H,), (H,))) >> fb.GetItem(0), SEQUENCES)
    # The 4H-wide sum of the two products and their bias rows (3 ops), then the gates and the
    # update: 4 activations, 2 products, a sum, tanh, a product.
    assert _sizes(compiler, cell) == [[3, 9]]


# --- 6. JiapengWu/TeMP, baselines/custom_gru.py: GRUCell. ``torch.mm`` with ``.t()``, biases
# added after, only the hidden side chunked, ``hidden - newgate``.


class TempGRUCell(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight_ih = nn.Parameter(0.3 * torch.randn(H, E))
        self.weight_hh = nn.Parameter(0.3 * torch.randn(3 * H, H))
        self.bias_ih = nn.Parameter(0.1 * torch.randn(H))
        self.bias_hh = nn.Parameter(0.1 * torch.randn(3 * H))

    def forward(self, input, hidden):
        i_n = torch.mm(input, self.weight_ih.t()) + self.bias_ih
        gh = torch.mm(hidden, self.weight_hh.t()) + self.bias_hh
        h_r, h_i, h_n = gh.chunk(3, 1)
        resetgate = torch.sigmoid(h_r)
        inputgate = torch.sigmoid(h_i)
        newgate = torch.tanh(i_n + resetgate * h_n)
        return newgate + inputgate * (hidden - newgate)


def test_temp_gru_cell() -> None:
    torch.manual_seed(5)
    cell = TempGRUCell()
    compiler = check_block(_sequence(cell, H), SEQUENCES)
    assert _sizes(compiler, cell) == [[9]]  # with the bias row added to the hidden side


# --- 7. jojonki/BiDAF, layers/highway.py: Highway. The activations are attributes holding
# ``F.relu`` and ``F.sigmoid`` (defaults of ``__init__``), layers in ``nn.ModuleList``s looped
# over, ``(1 - gate) * x``. Here it is the leaf of a tree: its output is the leaf's ``h``.


class BidafHighway(nn.Module):
    def __init__(self, size: int, n_layers: int = 2, act=F.relu, gate_act=F.sigmoid) -> None:
        super().__init__()
        self.n_layers, self.act, self.gate_act = n_layers, act, gate_act
        self.normal_layer = nn.ModuleList([nn.Linear(size, size) for _ in range(n_layers)])
        self.gate_layer = nn.ModuleList([nn.Linear(size, size) for _ in range(n_layers)])

    def forward(self, x):
        for i in range(self.n_layers):
            normal_layer_ret = self.act(self.normal_layer[i](x))
            gate = self.gate_act(self.gate_layer[i](x))
            x = gate * normal_layer_ret + (1 - gate) * x
        return x


class _HighwayLeaf(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.highway, self.h, self.c = BidafHighway(E), nn.Linear(E, H), nn.Linear(E, H)

    def forward(self, x):
        return torch.tanh(self.h(self.highway(x))), self.c(x)


def test_bidaf_highway() -> None:
    torch.manual_seed(6)
    leaf = _HighwayLeaf()
    compiler = check_block(_tree(KernelBenchTreeLSTM(), leaf), TREES)
    # Each layer: relu, sigmoid, *, 1 - gate, *, + (6 ops); the second layer reads the first's
    # output through two layers: two regions.
    assert _sizes(compiler, leaf) == [[6, 6]]
