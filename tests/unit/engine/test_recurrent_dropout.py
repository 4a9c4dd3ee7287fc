"""The Fold paper's Tree-LSTM regulariser (§3.5.1): recurrent dropout on each cell's candidate
update (Semeniuta et al. 2016) and the forget-gate bias; batched == eager in evaluation, never
merged while random, and a bad probability fails before any work."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from foldexp.data.calculator import calculator_splits
from foldexp.data.vocab import Vocabulary
from foldexp.models.cells import BinaryTreeLSTMCell, TreeLSTMLeaf, WordTreeLSTMCell
from foldexp.models.tree_lstm import TreeLSTMClassifier
from foldexp.testing import check_block
from foldexp.train.app import compose_config


def _children(rows: int, n: int) -> tuple:
    g = torch.Generator().manual_seed(1)
    return tuple(
        (torch.randn(rows, n, generator=g), torch.randn(rows, n, generator=g)) for _ in "lr"
    )


def test_cell_drops_the_update_only_and_keeps_the_memory() -> None:
    torch.manual_seed(0)
    n, p = 6, 0.5
    cell = BinaryTreeLSTMCell(n, recurrent_dropout=p)
    plain = BinaryTreeLSTMCell(n)
    plain.load_state_dict(cell.state_dict())
    left, right = _children(200, n)
    z = plain.gates(torch.cat([left[0], right[0]], 1))
    i, fl, fr, _, u = z.chunk(5, dim=1)
    memory = torch.sigmoid(fl) * left[1] + torch.sigmoid(fr) * right[1]
    update = torch.sigmoid(i) * torch.tanh(u)

    _, c = cell(left, right)
    kept = (c - memory).detach()
    # Each update element is either dropped (0) or scaled by 1/(1-p); the memory always passes.
    dropped = kept.abs() < 1e-6
    torch.testing.assert_close(kept[~dropped], update[~dropped].detach() / (1 - p))
    assert 0.35 < dropped.float().mean().item() < 0.65

    cell.eval()
    for got, want in zip(cell(left, right), plain(left, right)):
        torch.testing.assert_close(got, want)


def test_leaf_drops_its_update_in_training_only() -> None:
    torch.manual_seed(0)
    leaf = TreeLSTMLeaf(4, 5, recurrent_dropout=0.5)
    x = torch.randn(300, 4)
    _, c = leaf(x)
    assert (c == 0).float().mean().item() > 0.35
    leaf.eval()
    assert (leaf(x)[1] == 0).sum().item() == 0


def test_forget_bias_starts_both_forget_gates_there() -> None:
    torch.manual_seed(0)
    base = BinaryTreeLSTMCell(3).gates.bias.detach().clone()
    torch.manual_seed(0)
    biased = BinaryTreeLSTMCell(3, forget_bias=1.0).gates.bias.detach()
    torch.testing.assert_close(biased[3:9], base[3:9] + 1.0)
    torch.testing.assert_close(biased[:3], base[:3])
    torch.testing.assert_close(biased[9:], base[9:])


def _forget_gate_biases(model: torch.nn.Module) -> list[torch.Tensor]:
    """Both forget gates' biases (gate order i, f_left, f_right, o, u) of each binary cell."""
    cells = [m for m in model.modules() if isinstance(m, BinaryTreeLSTMCell)]
    return [c.gates.bias.detach()[c.hidden_size : 3 * c.hidden_size].clone() for c in cells]


def test_a_word_cell_starts_its_forget_gates_at_the_bias() -> None:
    torch.manual_seed(0)
    base = WordTreeLSTMCell(4, 3).cell.gates.bias.detach().clone()
    torch.manual_seed(0)
    biased = WordTreeLSTMCell(4, 3, forget_bias=-2.0).cell.gates.bias.detach()
    torch.testing.assert_close(biased[3:9], base[3:9] - 2.0)
    torch.testing.assert_close(biased[:3], base[:3])
    torch.testing.assert_close(biased[9:], base[9:])


def test_the_classifier_with_words_at_internal_nodes_applies_the_forget_bias() -> None:
    """The calculator trees have operators at internal nodes (``internal_words``): the model's
    cell there is a ``WordTreeLSTMCell``, which once took no forget_bias and ignored it."""
    (base,), (biased,) = (
        _forget_gate_biases(_calculator_model(internal_words=True, forget_bias=b)[0])
        for b in (0.0, 1.5)
    )
    torch.testing.assert_close(biased, base + 1.5)


def test_a_word_cell_drops_its_update_only_while_training() -> None:
    """The calculator's internal nodes use ``WordTreeLSTMCell``, which once ignored
    ``model.recurrent_dropout``: each unit of ``c`` keeps the memory and either drops the
    update or scales it by 1/(1-p)."""
    torch.manual_seed(0)
    n, p = 6, 0.5
    cell = WordTreeLSTMCell(4, n, recurrent_dropout=p)
    x = torch.randn(200, 4)
    children = _children(200, n)
    (hl, cl), (hr, cr) = children
    z = cell.cell.gates(torch.cat([hl, hr], 1)) + cell.x_gates(x)
    i, fl, fr, _, u = z.chunk(5, dim=1)
    memory = torch.sigmoid(fl) * cl + torch.sigmoid(fr) * cr
    update = torch.sigmoid(i) * torch.tanh(u)

    kept = (cell(x, children)[1] - memory).detach()
    dropped = kept.abs() < 1e-6
    assert dropped.any() and not dropped.all()
    torch.testing.assert_close(kept[~dropped], (update / (1 - p))[~dropped].detach())
    cell.eval()
    torch.testing.assert_close(cell(x, children)[1], memory + update)


def _calculator_model(**kw) -> tuple[TreeLSTMClassifier, list]:
    train, _, _ = calculator_splits(30, max_depth=4, seed=5)
    vocab = Vocabulary.from_trees(train)
    torch.manual_seed(0)
    model = TreeLSTMClassifier(vocab, 10, 4, 5, embedding_dropout=0.0, **kw)
    return model, train


@pytest.mark.parametrize("internal_words", [False, True])
def test_classifier_with_recurrent_dropout_batched_equals_eager_in_evaluation(
    internal_words: bool,
) -> None:
    model, trees = _calculator_model(
        recurrent_dropout=0.3, forget_bias=1.0, internal_words=internal_words
    )
    model.eval()
    check_block(model.compiler.root, trees[:12])


def test_random_cells_are_never_merged_while_training() -> None:
    model, trees = _calculator_model(recurrent_dropout=0.3)
    assert model.collate(trees).plan.num_merged == 0  # each leaf draws its own mask
    model.eval()
    assert model.collate(trees).plan.num_merged > 0
    plain, _ = _calculator_model()
    assert plain.collate(trees).plan.num_merged > 0  # no dropout anywhere: words merge


def test_training_with_recurrent_dropout_draws_masks_per_step() -> None:
    model, trees = _calculator_model(recurrent_dropout=0.5)
    batch = model.collate(trees)
    torch.manual_seed(3)
    first = model(batch)["loss"].item()
    torch.manual_seed(4)
    second = model(batch)["loss"].item()
    assert first != second  # masks are drawn per step
    model.eval()
    batch = model.collate(trees)
    assert model(batch)["loss"].item() == model(batch)["loss"].item()


@pytest.mark.parametrize("key", ["recurrent_dropout", "dropout", "embedding_dropout"])
def test_a_dropout_outside_0_1_fails_before_any_work(key: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=f"model.{key}=1.5; expected 0 <= value < 1"):
        compose_config(["experiment=sst_treelstm", f"model.{key}=1.5"], tmp_path)
