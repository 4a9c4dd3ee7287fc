"""The sequence-LSTM, weave and attention experiments on tiny offline data: configs compose and
instantiate, each runs through ``run_train``, each model is batched == eager (values and
gradients), and the dataset builders split, scale and cache as documented."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch

import foldexp.blocks as fb
from foldexp.data import NO_LABEL
from foldexp.experiments import datasets
from foldexp.experiments.build import build_model
from foldexp.experiments.molecule_data import molecules_csv
from foldexp.models import paper
from foldexp.models.attention import AttentionRegressor, attention_network
from foldexp.models.sequence import sentence_lstm
from foldexp.models.weave import WeaveRegressor, weave_atoms, weave_network
from foldexp.testing import check_block
from foldexp.train.app import compose_config
from foldexp.train.loop import run_train

EXPERIMENTS = [
    "sst_lstm",
    "esol_weave",
    "freesolv_weave",
    "addition_attention",
    "multiplication_attention",
]

# Small PTB trees: every root label 0-4 occurs, so both SST views are non-empty.
_TREES = [
    "(3 (2 a) (3 (3 good) (2 film)))",
    "(1 (2 a) (1 (1 dull) (2 film)))",
    "(4 (4 great) (3 (2 acting) (3 throughout)))",
    "(0 (0 awful) (2 film))",
    "(2 (2 a) (2 film))",
    "(3 (2 it) (3 (2 is) (3 (3 fine) (2 .))))",
    "(1 (1 boring) (2 .))",
    "(4 (4 superb))",
]
_SMILES = [
    "CCO",
    "CCCC",
    "c1ccccc1",
    "CC(=O)O",
    "CCN",
    "OCCO",
    "c1ccncc1",
    "CC(C)O",
    "ClCCl",
    "CCOCC",
    "C1CCCCC1",
    "c1ccc2ccccc2c1",
    "CC#N",
    "CCCl",
    "O=C1CCCCC1",
    "Cc1ccccc1",
    "CS(C)=O",
    "NCCO",
    "FC(F)F",
    "C=CC",
]


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data root with a few SST trees and two molecule CSVs in the real files' layout."""
    root = tmp_path_factory.mktemp("data")
    (root / "sst").mkdir()
    for split in ("train", "dev", "test"):
        (root / "sst" / f"{split}.txt").write_text("\n".join(_TREES) + "\n")
    (root / "molecules").mkdir()
    values = np.linspace(-3.0, 1.0, len(_SMILES))
    esol = ["smiles,measured log solubility in mols per litre"]
    esol += [f"{s},{v:.3f}" for s, v in zip(_SMILES, values)]
    (root / "molecules" / "delaney-processed.csv").write_text("\n".join(esol) + "\n")
    free = ["smiles,expt"] + [
        f"{s},{2 * v:.3f}" if k != 3 else f"{s}," for k, (s, v) in enumerate(zip(_SMILES, values))
    ]
    (root / "molecules" / "freesolv.csv").write_text("\n".join(free) + "\n")
    return root


def _tiny(name: str, data: Path, cache: Path) -> list[str]:
    """Overrides that make experiment ``name`` run in about a second on ``tiny_data``."""
    common = [
        f"experiment={name}",
        f"paths.data_dir={data}",
        f"paths.cache_dir={cache}",
        "trainer.epochs=2",
        "trainer.batch_size=4",
        "trainer.eval_batch_size=8",
        "trainer.progress=false",
        "trainer.plots=false",
        "trainer.patience=0",
    ]
    if name == "sst_lstm":
        return [*common, "model.embed_size=8", "model.hidden_size=8"]
    if name.endswith("_weave"):
        sizes = ["atom_size=6", "pair_size=5", "graph_size=8", "mlp_size=8"]
        return [*common, *(f"model.{s}" for s in sizes)]
    lengths = ["n_train=24", "n_dev=8", "n_test=8", "min_len=4", "max_len=9"]
    return [*common, *(f"dataset.{s}" for s in lengths), "model.hidden_size=8"]


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_composes_and_instantiates(name: str, tiny_data: Path, tmp_path: Path) -> None:
    from hydra.utils import instantiate

    cfg = compose_config(_tiny(name, tiny_data, tmp_path / "cache"), tmp_path)
    assert cfg.task_name == name
    bundle = instantiate(cfg.dataset, _convert_="all")
    assert bundle.train and bundle.dev and bundle.test
    model = build_model(cfg.model, bundle.info)  # the info entries its constructor names
    batch = model.collate(bundle.train[:3])
    out = model(batch)
    assert out["loss"].dim() == 0 and torch.isfinite(out["loss"])
    metrics = model.summarize({k: float(v.detach()) for k, v in out.items()})
    assert metrics and all(np.isfinite(v) for v in metrics.values())


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_trains_through_run_train(name: str, tiny_data: Path, tmp_path: Path) -> None:
    cfg = compose_config(_tiny(name, tiny_data, tmp_path / "cache"), tmp_path / "run")
    results = run_train(cfg)
    metric = {"sst_lstm": "accuracy", "addition_attention": "mse"}.get(
        name, "mse" if name.endswith("attention") else "rmse"
    )
    assert np.isfinite(results[f"test_{metric}"])
    assert (tmp_path / "run" / "checkpoints" / "best.pt").exists()
    columns = set(pd.read_csv(tmp_path / "run" / "metrics.csv").columns)
    assert {f"train_{metric}", f"dev_{metric}", "train_loss"} <= columns
    assert cfg.trainer.select_metric in columns
    if name.endswith("_weave"):
        assert (
            results["best_dev_rmse"]
            == pd.read_csv(tmp_path / "run" / "metrics.csv")["dev_rmse"].min()
        )
        assert list((tmp_path / "cache").glob("*.npz")), "featurisation was not cached"
    if name.endswith("_attention"):
        assert 0 <= results["test_accuracy"] <= 1


def test_weave_schedules_built_in_workers_give_the_same_run(
    tiny_data: Path, tmp_path: Path
) -> None:
    args = _tiny("esol_weave", tiny_data, tmp_path / "cache")
    a = run_train(compose_config(args, tmp_path / "a"))
    b = run_train(compose_config([*args, "trainer.num_workers=2"], tmp_path / "b"))
    assert {k: v for k, v in a.items() if k.startswith("test_")} == {
        k: v for k, v in b.items() if k.startswith("test_")
    }


# ---------------------------------------------------------------------- batched == eager


def _molecule(rng: np.random.Generator, atoms: int, a: int = 4, p: int = 3) -> tuple:
    feats = rng.normal(size=(atoms, a)).astype(np.float32)
    pairs = rng.normal(size=(atoms, atoms, p)).astype(np.float32)
    return feats, (pairs + pairs.transpose(1, 0, 2)) / 2


def test_weave_network_batched_equals_eager(rng: np.random.Generator) -> None:
    mols = [_molecule(rng, k) for k in (1, 4, 2, 6, 3)]
    for pool in ("sum", "mean"):
        net = weave_network(
            4, 3, 2, layers=2, atom_size=5, pair_size=4, graph_size=6, mlp_size=5, pool=pool
        )
        check_block(net, mols)


def test_weave_atoms_is_the_atom_half_of_the_paper_module(rng: np.random.Generator) -> None:
    fs = [fb.FC(5) for _ in range(6)]
    inputs = fb.Record((fb.Map(fb.Vector(4)), fb.Map(fb.Map(fb.Vector(3)))))
    full = inputs >> paper.weave_module(*fs) >> fb.GetItem(0) >> fb.Sum()
    half = inputs >> weave_atoms(*fs[:3]) >> fb.Sum()
    for mol in [_molecule(rng, k) for k in (1, 3, 5)]:
        torch.testing.assert_close(half.eval(mol), full.eval(mol))
    check_block(half, [_molecule(rng, k) for k in (2, 1, 4)])


@pytest.mark.parametrize("score", ["tanh", "linear"])
def test_attention_network_batched_equals_eager(score: str, rng: np.random.Generator) -> None:
    seqs = [rng.random(size=(k, 2)).astype(np.float32) for k in (1, 5, 9, 2, 7)]
    check_block(attention_network(2, 6, score=score), seqs)


def test_sentence_lstm_batched_equals_eager() -> None:
    word = fb.Scalar("int64") >> fb.Function(fb.Embedding(12, 5))
    sentences = [[1, 2, 3], [], [4], [5, 6, 7, 8, 9, 10, 11], [0, 0]]
    check_block(sentence_lstm(word, 5, 6), sentences)


# ---------------------------------------------------------------------- models and builders


def test_weave_loss_masks_missing_targets_and_reports_original_units() -> None:
    rng = np.random.default_rng(1)

    class Mol:  # MoleculeGraph's fields the model reads
        def __init__(self, n: int, targets: list[float], mask: list[bool]) -> None:
            self.atom_features, self.pair_features = _molecule(rng, n)
            self.targets = np.array(targets, np.float32)
            self.target_mask = np.array(mask)

    mols = [Mol(2, [1.0, 5.0], [True, True]), Mol(3, [2.0, 1e6], [True, False])]
    model = WeaveRegressor(
        4, 3, 2, [1.5, 2.0], [0.5, 4.0], atom_size=4, pair_size=3, graph_size=4, mlp_size=4
    )
    batch = model.collate(mols)
    out = model(batch)
    pred = model.predict(batch).detach()
    err = (pred - torch.tensor([[1.0, 5.0], [2.0, 0.0]])) ** 2
    assert float(out["count"]) == 3
    torch.testing.assert_close(out["sq_error"], err[[0, 0, 1], [0, 1, 0]].sum())
    z_err = err / torch.tensor([0.25, 16.0])
    torch.testing.assert_close(out["loss"], z_err[[0, 0, 1], [0, 1, 0]].sum() / 3)
    sums = {k: float(v.detach()) for k, v in out.items()}
    assert model.summarize(sums)["rmse"] == pytest.approx((sums["sq_error"] / 3) ** 0.5)


def test_attention_accuracy_counts_predictions_within_tolerance() -> None:
    model = AttentionRegressor(hidden_size=4, tolerance=0.04)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.compiler.layers[-1].linear.bias.fill_(1.0)  # predicts 1.0 for every sequence
    examples = [
        datasets.marked_sequences(n_train=4, n_dev=1, n_test=1, min_len=3, max_len=4)
        .train[k]
        ._replace(target=t)
        for k, t in enumerate([1.0, 1.03, 1.05, 0.5])
    ]
    out = model(model.collate(examples))
    metrics = model.summarize({k: float(v.detach()) for k, v in out.items()})
    assert metrics["accuracy"] == 0.5
    assert metrics["mse"] == pytest.approx((0.03**2 + 0.05**2 + 0.5**2) / 4, rel=1e-4)


def _preset(name: str, data: Path, cache: Path | None, **keys: Any) -> Any:
    """The ``molecules_csv`` builder with the keys of ``conf/dataset/<name>.yaml``."""
    file, target = {
        "esol": ("delaney-processed.csv", "measured log solubility in mols per litre"),
        "freesolv": ("freesolv.csv", "expt"),
    }[name]
    cache_dir = None if cache is None else str(cache)
    path = str(data / "molecules" / file)
    return molecules_csv(path, [target], cache_dir=cache_dir, name=name, **keys)


def test_molecule_splits_scaling_and_cache(tiny_data: Path, tmp_path: Path) -> None:
    a = _preset("esol", tiny_data, tmp_path, seed=3)
    b = _preset("esol", tiny_data, tmp_path, seed=3)
    c = _preset("esol", tiny_data, tmp_path, seed=4)
    assert (len(a.train), len(a.dev), len(a.test)) == (16, 2, 2)
    assert [m.smiles for m in a.test] == [m.smiles for m in b.test]
    assert [m.smiles for m in a.test] != [m.smiles for m in c.test]
    train = np.array([m.targets[0] for m in a.train])
    assert a.info["target_mean"] == pytest.approx([train.mean()], rel=1e-5)
    assert a.info["target_std"] == pytest.approx([train.std()], rel=1e-5)
    assert len(list(tmp_path.glob("*.npz"))) == 1
    scaffold = _preset("esol", tiny_data, None, split="scaffold")
    smiles = [{m.smiles for m in part} for part in (scaffold.train, scaffold.dev, scaffold.test)]
    assert sum(map(len, smiles)) == len(_SMILES) and not (smiles[0] & smiles[2])
    # A missing FreeSolv value is masked and left out of the training statistics.
    free = _preset("freesolv", tiny_data, None, split="scaffold")
    missing = [m for m in free.train + free.dev + free.test if not m.target_mask[0]]
    assert [m.smiles for m in missing] == [_SMILES[3]]


def test_marked_sequences_splits_are_disjoint_and_sized() -> None:
    bundle = datasets.marked_sequences("multiplication", 30, 10, 10, min_len=5, max_len=12)
    assert (len(bundle.train), len(bundle.dev), len(bundle.test)) == (30, 10, 10)
    lengths = {len(e.inputs) for e in bundle.train + bundle.dev + bundle.test}
    assert min(lengths) >= 5 and max(lengths) <= 12
    first = bundle.train[0]
    marked = first.inputs[first.inputs[:, 1] == 1, 0]
    assert first.target == pytest.approx(float(marked[0] * marked[1]))
    assert not np.array_equal(bundle.train[0].inputs, bundle.dev[0].inputs)


def test_sst_sentences_views(tiny_data: Path) -> None:
    fine = datasets.sst_sentences(str(tiny_data), view="fine")
    binary = datasets.sst_sentences(str(tiny_data), view="binary")
    assert fine.info["num_classes"] == 5 and binary.info["num_classes"] == 2
    assert fine.train[0] == (["a", "good", "film"], 3)
    assert len(binary.train) == len(_TREES) - 1  # the neutral-root tree is dropped
    assert {label for _, label in binary.train} == {0, 1}
    assert NO_LABEL not in {label for _, label in fine.train}


def test_sst_vector_vocab_adds_only_dev_test_words_with_vectors(tmp_path: Path) -> None:
    (tmp_path / "sst").mkdir()
    trees = {
        "train": "(3 (2 a) (3 good))",
        "dev": "(1 (2 a) (1 dull))",  # "dull" has a vector
        "test": "(2 (2 a) (2 zzyzx))",  # "zzyzx" has none
    }
    for split, line in trees.items():
        (tmp_path / "sst" / f"{split}.txt").write_text(line + "\n")
    vectors = tmp_path / "vec.txt"
    vectors.write_text("a 1 0\ngood 0 1\ndull -1 0\n")
    plain = datasets.sst(str(tmp_path), word_vectors=str(vectors))
    wide = datasets.sst(str(tmp_path), word_vectors=str(vectors), vector_vocab=True)
    assert "dull" not in plain.info["vocab"]
    vocab = wide.info["vocab"]
    assert "dull" in vocab and "zzyzx" not in vocab
    assert vocab.words[: len(plain.info["vocab"])] == plain.info["vocab"].words  # train ids kept
    np.testing.assert_array_equal(wide.info["embeddings"][vocab.index("dull")], [-1.0, 0.0])
