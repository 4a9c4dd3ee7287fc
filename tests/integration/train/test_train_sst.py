"""The SST Tree-LSTM experiment on a small slice of the real treebank (FOLDEXP_DATA)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from hydra.utils import instantiate

from foldexp.data.vocab import Vocabulary
from foldexp.train.app import compose_config
from foldexp.train.loop import run_train


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


def test_sst_binary_view_has_two_classes(data_root: Path, tmp_path: Path) -> None:
    cfg = compose_config(
        [
            "experiment=sst_treelstm",
            f"paths.data_dir={data_root}",
            "dataset.view=binary",
            "dataset.limit=60",
            "debug=tiny",
            "model.hidden_size=16",
        ],
        tmp_path,
    )
    results = run_train(cfg)
    assert results["config"]["dataset"]["view"] == "binary"
    assert 0 <= results["test_accuracy"] <= 1
