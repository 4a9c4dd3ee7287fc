"""Binary SST scoring. Tai et al.'s binary model (``dataset.neutral_nodes``): neutral phrases
train a third class, predictions and accuracies use negative/positive only, and the option has
no effect on the fine view. TF Fold's binary scores of a fine-grained model (``polarity``): the
larger summed probability of the negative or positive classes, over nodes labelled in either."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from foldexp.data.sst import NEUTRAL, load_sst
from foldexp.data.trees import NO_LABEL
from foldexp.data.vocab import Vocabulary
from foldexp.models.tree_lstm import TreeLSTMClassifier
from foldexp.train.app import compose_config
from foldexp.train.loop import run_train


def test_binary_view_keeps_neutral_nodes_as_a_third_class(sst_data_dir: Path) -> None:
    plain = load_sst("train", sst_data_dir, view="binary")
    kept = load_sst("train", sst_data_dir, view="binary", neutral_nodes=True)
    assert [t.label for t in kept] == [t.label for t in plain] == [1, 0, 1, 0]  # neutral root gone
    assert plain[0].labels() == [NO_LABEL, NO_LABEL, 1, 1, 1]
    assert kept[0].labels() == [NEUTRAL, NEUTRAL, 1, 1, 1]
    assert kept[3].labels() == [NEUTRAL, NEUTRAL, 1, 0, 0]  # "Not quite right"
    fine = load_sst("train", sst_data_dir)
    assert load_sst("train", sst_data_dir, neutral_nodes=True) == fine  # five classes either way


def _model(trees: list) -> TreeLSTMClassifier:
    vocab = Vocabulary.from_trees(trees)
    torch.manual_seed(0)
    return TreeLSTMClassifier(vocab, num_classes=3, predict_classes=2, hidden_size=8).eval()


def test_neutral_is_trained_but_never_predicted_or_scored(sst_data_dir: Path) -> None:
    trees = load_sst("train", sst_data_dir, view="binary", neutral_nodes=True)
    model = _model(trees)
    with torch.no_grad():  # neutral dominates every logit, negative beats positive
        model.classify.weight.zero_()
        model.classify.bias.copy_(torch.tensor([1.0, 0.0, 50.0]))
    out = model(model.collate(trees))
    labels = [label for t in trees for label in t.labels()]
    # Every prediction is negative: correct exactly where the label is 0.
    assert int(out["root_correct"]) == sum(t.label == 0 for t in trees) == 2
    assert int(out["root_count"]) == 4
    assert int(out["node_count"]) == sum(label in (0, 1) for label in labels)
    assert int(out["node_correct"]) == labels.count(0)
    # The loss covers the neutral nodes too: the mean over trees of each node's cross-entropy.
    logits = torch.tensor([[1.0, 0.0, 50.0]]).expand(len(labels), 3)
    expected = F.cross_entropy(logits, torch.tensor(labels), reduction="sum") / len(trees)
    torch.testing.assert_close(out["loss"], expected)


def test_predict_classes_must_fit_the_classes(sst_data_dir: Path) -> None:
    vocab = Vocabulary.from_trees(load_sst("train", sst_data_dir))
    with pytest.raises(ValueError, match="predict_classes=4; expected 2..3"):
        TreeLSTMClassifier(vocab, num_classes=3, predict_classes=4)


def test_bundle_classes_follow_the_view(sst_data_dir: Path) -> None:
    from foldexp.experiments.datasets import sst

    assert sst(str(sst_data_dir), view="fine", neutral_nodes=True).info["num_classes"] == 5
    binary = sst(str(sst_data_dir), view="binary", neutral_nodes=True).info
    assert (binary["num_classes"], binary["predict_classes"], binary["polarity"]) == (3, 2, None)
    assert sst(str(sst_data_dir), view="binary").info["num_classes"] == 2


def test_binary_run_with_neutral_nodes_trains_three_classes(sst_overrides, tmp_path: Path) -> None:
    overrides = sst_overrides("dataset.view=binary", "dataset.neutral_nodes=true")
    results = run_train(compose_config(overrides, tmp_path))
    assert 0.0 <= results["test_accuracy"] <= 1.0
    state = torch.load(tmp_path / "checkpoints" / "best.pt", weights_only=True)["model"]
    assert state["classify.weight"].shape[0] == 3


def _fine_model(trees: list, bias: list[float], polarity=([0, 1], [3, 4])) -> TreeLSTMClassifier:
    torch.manual_seed(0)
    vocab = Vocabulary.from_trees(trees)
    model = TreeLSTMClassifier(vocab, num_classes=5, hidden_size=8, polarity=polarity).eval()
    with torch.no_grad():  # every node gets the same probabilities
        model.classify.weight.zero_()
        model.classify.bias.copy_(torch.tensor(bias))
    return model


def test_fine_model_scores_binary_by_summed_probabilities(sst_data_dir: Path) -> None:
    trees = load_sst("train", sst_data_dir)
    # Class 0 is the single most likely, yet 3 + 4 outweigh 0 + 1: every node says positive.
    model = _fine_model(trees, [1.0, -5.0, 0.9, 0.8, 0.8])
    out = model(model.collate(trees))
    roots = [t.label for t in trees]
    labels = [label for t in trees for label in t.labels()]
    assert int(out["root_correct"]) == roots.count(0)  # the fine prediction is class 0
    assert int(out["root_binary_correct"]) == sum(r >= 3 for r in roots) == 2
    assert int(out["root_binary_count"]) == sum(r != 2 for r in roots) == 4
    assert int(out["node_binary_correct"]) == sum(label >= 3 for label in labels)
    assert int(out["node_binary_count"]) == sum(label != 2 for label in labels)
    metrics = model.summarize({k: float(v.detach()) for k, v in out.items()})
    assert metrics["binary_accuracy"] == 0.5
    assert metrics["binary_node_accuracy"] == pytest.approx(
        sum(label >= 3 for label in labels) / sum(label != 2 for label in labels)
    )


def test_no_binary_metrics_without_polarity(sst_data_dir: Path) -> None:
    trees = load_sst("train", sst_data_dir)
    model = _fine_model(trees, [0.0] * 5, polarity=None)
    out = model(model.collate(trees))
    assert "root_binary_count" not in out
    assert set(model.summarize({k: float(v.detach()) for k, v in out.items()})) == {
        "accuracy",
        "node_accuracy",
    }


@pytest.mark.parametrize(
    "polarity, message",
    [(([0, 1], [1, 3]), "disjoint"), (([], [3]), "disjoint"), (([0], [5]), "0..4")],
)
def test_bad_polarity_fails(polarity, message: str, sst_data_dir: Path) -> None:
    with pytest.raises(ValueError, match=message):
        _fine_model(load_sst("train", sst_data_dir), [0.0] * 5, polarity=polarity)


def test_fine_sst_run_reports_binary_accuracy(sst_overrides, tmp_path: Path) -> None:
    results = run_train(compose_config(sst_overrides(), tmp_path))
    assert 0.0 <= results["test_binary_accuracy"] <= 1.0
    epochs = pd.read_csv(tmp_path / "metrics.csv")
    assert epochs["dev_binary_accuracy"].between(0.0, 1.0).all()
