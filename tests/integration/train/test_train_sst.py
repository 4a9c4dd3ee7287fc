"""The SST Tree-LSTM experiment on a small slice of the real treebank (FOLDEXP_DATA)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from hydra.utils import instantiate
from torch import nn

from foldexp.data.vocab import Vocabulary
from foldexp.train.app import compose_config
from foldexp.train.loop import run_train


def _tiny_slice(data_root: Path, experiment: str, *extra: str) -> list[str]:
    """Overrides for a few batches of ``experiment`` on the first 60 trees of each split."""
    return [
        f"experiment={experiment}",
        f"paths.data_dir={data_root}",
        "dataset.limit=60",
        "debug=tiny",
        "model.hidden_size=16",
        *extra,
    ]


def test_sst_treelstm_glove_trains_on_a_slice(data_root: Path, tmp_path: Path) -> None:
    # The GloVe preset finds its vectors under the data folder and adds dev/test words.
    cfg = compose_config(
        [
            "experiment=sst_treelstm_glove",
            f"paths.data_dir={data_root}",
            "dataset.limit=200",
            "trainer.epochs=2",
            "trainer.progress=false",
            "model.hidden_size=32",
            "trainer.plots=false",
        ],
        tmp_path,
    )
    results = run_train(cfg)
    assert results["dataset"] == "sst" and 0 <= results["test_accuracy"] <= 1
    assert results["config"]["dataset"]["word_vectors"].startswith(str(data_root))
    bundle = instantiate(cfg.dataset, _convert_="all")
    train_only = Vocabulary.from_trees(bundle.train)
    assert len(bundle.info["vocab"]) > len(train_only)  # dev/test words that have vectors
    assert bundle.info["embeddings"].shape == (len(bundle.info["vocab"]), 50)
    metrics = pd.read_csv(tmp_path / "metrics.csv")
    assert metrics["train_loss"].iloc[1] < metrics["train_loss"].iloc[0]


def test_sst_binary_view_predicts_two_classes(data_root: Path, tmp_path: Path) -> None:
    # Tai et al.'s binary model: neutral phrases train a third class that is never predicted.
    cfg = compose_config(_tiny_slice(data_root, "sst_treelstm", "dataset.view=binary"), tmp_path)
    bundle = instantiate(cfg.dataset, _convert_="all")
    assert (bundle.info["num_classes"], bundle.info["predict_classes"]) == (3, 2)
    labels = {label for tree in bundle.train for label in tree.labels()}
    assert labels == {0, 1, 2} and {t.label for t in bundle.train + bundle.test} <= {0, 1}
    results = run_train(cfg)
    assert results["config"]["dataset"]["view"] == "binary"
    assert 0 <= results["test_accuracy"] <= 1


def test_sst_fine_view_also_reports_binary_accuracy(data_root: Path, tmp_path: Path) -> None:
    cfg = compose_config(_tiny_slice(data_root, "sst_treelstm"), tmp_path)
    results = run_train(cfg)
    assert 0 <= results["test_binary_accuracy"] <= 1 and 0 <= results["test_accuracy"] <= 1


def test_sst_treelstm_fold_is_the_papers_model_and_trains(data_root: Path, tmp_path: Path) -> None:
    # The Fold paper's §3.5.1 Tree-LSTM: recurrent dropout, no weight decay, state 300.
    cfg = compose_config(_tiny_slice(data_root, "sst_treelstm_fold"), tmp_path)
    assert cfg.model.recurrent_dropout == 0.25 and cfg.optimizer.weight_decay == 0.0
    assert compose_config(["experiment=sst_treelstm_fold"], tmp_path).model.hidden_size == 300
    bundle = instantiate(cfg.dataset, _convert_="all")
    model = instantiate(cfg.model, **bundle.info, _convert_="all")
    drops = [m.p for m in model.modules() if isinstance(m, nn.Dropout)]
    assert drops.count(0.25) >= 4  # words, classifier input, leaf and internal updates
    results = run_train(cfg)
    assert 0 <= results["test_accuracy"] <= 1
