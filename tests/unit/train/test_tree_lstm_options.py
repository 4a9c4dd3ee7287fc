"""Tree-LSTM training options: word dropout (``model.word_dropout``), an extra weight on the root's
loss (``model.root_loss_weight``), the leaf LSTM (``model.leaf_context_size``) through
``foldexp train``, and a frozen second channel of the pretrained vectors
(``model.static_vectors``); bad values fail before any data is read."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import foldexp.blocks as fb
from foldexp.data.sst import load_sst
from foldexp.data.vocab import Vocabulary
from foldexp.models.cells import TreeLSTMLeaf
from foldexp.models.tree_lstm import TreeLSTMClassifier
from foldexp.models.tree_parts import WordDropout
from foldexp.testing import check_block
from foldexp.train.app import compose_config
from foldexp.train.loop import run_train


def test_word_dropout_replaces_words_by_unk_while_training_only() -> None:
    torch.manual_seed(0)
    drop = WordDropout(0.3, unk_index=0)
    ids = torch.arange(1, 20001)
    out = drop(ids)
    dropped = out != ids
    assert (out[dropped] == 0).all()  # a dropped word becomes <unk>, nothing else
    assert 0.28 < dropped.float().mean().item() < 0.32
    drop.eval()
    assert torch.equal(drop(ids), ids)
    with pytest.raises(ValueError, match="word_dropout=1.0"):
        WordDropout(1.0, 0)


def _model(trees: list, **kw) -> TreeLSTMClassifier:
    torch.manual_seed(0)
    return TreeLSTMClassifier(Vocabulary.from_trees(trees), 5, 6, 7, **kw)


def test_word_dropout_leaves_evaluation_unchanged(sst_data_dir: Path) -> None:
    trees = load_sst("train", sst_data_dir)
    plain, dropping = _model(trees).eval(), _model(trees, word_dropout=0.5).eval()
    torch.testing.assert_close(
        dropping(dropping.collate(trees))["loss"], plain(plain.collate(trees))["loss"]
    )
    dropping.train()
    torch.manual_seed(1)
    assert dropping(dropping.collate(trees))["loss"] != plain(plain.collate(trees))["loss"]


def test_root_loss_weight_adds_the_roots_cross_entropy(sst_data_dir: Path) -> None:
    trees = load_sst("train", sst_data_dir)
    model = _model(trees, root_loss_weight=2.0).eval()
    with torch.no_grad():  # every node gets the same logits
        model.classify.weight.zero_()
        model.classify.bias.copy_(torch.tensor([0.5, -1.0, 0.0, 2.0, 1.0]))
    out = model(model.collate(trees))
    nodes = torch.tensor([label for t in trees for label in t.labels()])
    roots = torch.tensor([t.label for t in trees])
    logits = model.classify.bias.detach()
    node_ce = F.cross_entropy(logits.expand(len(nodes), 5), nodes, reduction="sum")
    root_ce = F.cross_entropy(logits.expand(len(roots), 5), roots, reduction="sum")
    torch.testing.assert_close(out["loss"], (node_ce + 2.0 * root_ce) / len(trees))


def test_train_with_every_option(sst_overrides, tmp_path: Path) -> None:
    overrides = sst_overrides(
        "model.word_dropout=0.2",
        "model.root_loss_weight=1.0",
        "model.leaf_context_size=5",
    )
    results = run_train(compose_config(overrides, tmp_path / "run"))
    assert 0.0 <= results["test_accuracy"] <= 1.0
    state = torch.load(tmp_path / "run" / "checkpoints" / "best.pt", weights_only=True)["model"]
    # Two LSTMs of 5 over the 50-d words, and leaves reading their 10-d concatenation.
    lstm = [v for k, v in state.items() if k.endswith("cell.weight_ih")]
    assert sorted(tuple(w.shape) for w in lstm) == [(20, 50), (20, 50)]
    assert any(tuple(v.shape) == (24, 10) for k, v in state.items() if k.endswith("weight"))


@pytest.mark.parametrize(
    "override, message",
    [
        ("model.word_dropout=1.0", "model.word_dropout=1.0; expected 0 <= value < 1"),
        ("model.label_smoothing=1.5", "model.label_smoothing=1.5; expected 0 <= value < 1"),
        ("model.root_loss_weight=-1", "model.root_loss_weight=-1.0; expected a value >= 0"),
        ("model.leaf_context_size=-2", "model.leaf_context_size=-2; expected a value >= 0"),
    ],
)
def test_bad_values_fail_before_any_work(override: str, message: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=message):
        compose_config(["experiment=sst_treelstm", override], tmp_path)


def test_static_vectors_add_a_frozen_channel(sst_data_dir: Path) -> None:
    trees = load_sst("train", sst_data_dir)
    vocab = Vocabulary.from_trees(trees)
    vectors = np.random.default_rng(0).normal(size=(len(vocab), 3)).astype(np.float32)
    torch.manual_seed(0)
    model = TreeLSTMClassifier(vocab, 5, hidden_size=4, embeddings=vectors, static_vectors=True)
    (leaf,) = [m for m in model.modules() if isinstance(m, TreeLSTMLeaf)]
    assert leaf.gates.in_features == 6  # tuned 3 + fixed 3
    tables = [m for m in model.modules() if isinstance(m, fb.Embedding)]
    frozen = [t for t in tables if not t.weight.requires_grad]
    assert len(tables) == 2 and len(frozen) == 1
    check_block(model.eval().compiler.root, trees)  # batched == eager, values and gradients
    model.train()
    optimizer = torch.optim.Adagrad([p for p in model.parameters() if p.requires_grad], lr=0.5)
    model(model.collate(trees))["loss"].backward()
    optimizer.step()
    torch.testing.assert_close(frozen[0].weight, torch.from_numpy(vectors))
    assert not torch.allclose(model.embedding.weight, torch.from_numpy(vectors))
    with pytest.raises(ValueError, match="static_vectors: needs pretrained vectors"):
        TreeLSTMClassifier(vocab, 5, static_vectors=True)


def test_label_smoothing_acts_on_the_training_loss_only(sst_data_dir: Path) -> None:
    trees = load_sst("train", sst_data_dir)
    model = _model(trees, label_smoothing=0.2)
    with torch.no_grad():  # every node gets the same logits; no dropout in this model
        model.classify.weight.zero_()
        model.classify.bias.copy_(torch.tensor([0.5, -1.0, 0.0, 2.0, 1.0]))
    nodes = torch.tensor([label for t in trees for label in t.labels()])
    logits = model.classify.bias.detach().expand(len(nodes), 5)
    log_p = logits.log_softmax(1)
    # (1 - 0.2) of the label's log-likelihood plus 0.2 of the mean over the five classes.
    smoothed = -(0.8 * log_p.gather(1, nodes[:, None]).squeeze(1) + 0.2 * log_p.mean(1)).sum()
    torch.testing.assert_close(model(model.collate(trees))["loss"], smoothed / len(trees))
    plain = F.cross_entropy(logits, nodes, reduction="sum") / len(trees)
    torch.testing.assert_close(model.eval()(model.collate(trees))["loss"], plain)
