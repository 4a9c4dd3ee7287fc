"""The SST Tree-LSTM experiment on a small slice of the real treebank (FOLDEXP_DATA)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from foldexp.train.app import compose_config
from foldexp.train.loop import run_train


def test_sst_treelstm_trains_on_a_slice(data_root: Path, tmp_path: Path) -> None:
    wordvec = data_root / "wordvec" / "glove.6B.50d.sst_vocab.txt.gz"
    cfg = compose_config(
        [
            "experiment=sst_treelstm",
            f"paths.data_dir={data_root}",
            "dataset.limit=200",
            "trainer.epochs=2",
            "trainer.progress=false",
            "model.hidden_size=32",
            f"dataset.word_vectors={wordvec}",
            "trainer.plots=false",
        ],
        tmp_path,
    )
    results = run_train(cfg)
    assert results["dataset"] == "sst" and 0 <= results["test_accuracy"] <= 1
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
