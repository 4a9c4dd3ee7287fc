"""No training step of any preset makes the host wait for the device on CUDA's route: forward,
loss, statistics, backward, clipping, the optimizer step and the parameter average, counted on
the CPU by ``count_ops`` (``host_syncs`` says which ops wait on CUDA: reads of a value,
boolean-mask indexing, ``nonzero``, ``unique``, a sparse ``coalesce``, ...). Each preset trains
on tiny synthetic data in the real files' layout, on the route a CUDA run takes: foldexp's
CPU-only kernels off (``cuda_route``), the compile mode CUDA defaults to, dense word-table
gradients (``sparse_rows.SPARSE_DEVICES``), statistics read back every few steps
(``fit.read_every``). A later CUDA-graph capture of the step needs this."""

from __future__ import annotations

import gzip
import math
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from foldexp.bench.host_syncs import where_syncs
from foldexp.bench.overhead import count_ops, cuda_route
from foldexp.config import CONF_DIR
from foldexp.executor import resolve_compile_mode
from foldexp.train import fit, sparse_rows
from foldexp.train.app import compose_config
from foldexp.train.loop import run_train

# Binary PTB trees (tree_lstm refuses a unary node): every label 0-4 occurs.
_TREES = [
    "(3 (2 a) (3 (3 good) (2 film)))",
    "(1 (2 a) (1 (1 dull) (2 film)))",
    "(4 (4 great) (3 (2 acting) (3 throughout)))",
    "(0 (0 awful) (2 film))",
    "(2 (2 a) (2 film))",
    "(3 (2 it) (3 (2 is) (3 (3 fine) (2 .))))",
    "(1 (1 boring) (2 .))",
    "(4 (4 superb) (2 .))",
]
_SMILES = "CCO CCCC c1ccccc1 CC(=O)O CCN OCCO c1ccncc1 CC(C)O ClCCl CCOCC C1CCCCC1 CC#N".split()
_RUN = [
    "trainer.epochs=1",
    "trainer.limit_batches=2",
    "trainer.batch_size=4",
    "trainer.eval_batch_size=8",
    "trainer.progress=false",
    "trainer.plots=false",
    "trainer.patience=0",
    "device.onednn=false",  # (as cuda_route: the run's own switches would turn them back on)
    "device.fused_cells=false",
    "device.compile=off",  # (the per-group route; the tape, CUDA's default, in the +tape cases)
]
_TAPE = f"device.compile={resolve_compile_mode(None, 'cuda')}"  # what a CUDA run defaults to
_SMALL = ["model.embed_size=8", "model.hidden_size=8"]
_WEAVE = ["model.atom_size=6", "model.pair_size=5", "model.graph_size=8", "model.mlp_size=8"]
_LENGTHS = ["n_train=16", "n_dev=8", "n_test=8", "min_len=4", "max_len=9"]
_SEQUENCES = [*(f"dataset.{s}" for s in _LENGTHS), "model.hidden_size=8"]
_DMPNN = ["model=dmpnn", "model.hidden_size=8", "model.depth=2"]

# Each preset (its name first) and the variants that change the step: a model swapped in,
# the mean-variance head, gradient clipping with the parameter average, the tape.
CASES: dict[str, list[str]] = {
    "calc_treelstm": ["dataset.n=64", *_SMALL],
    "calc_treelstm+tape": ["dataset.n=64", *_SMALL, _TAPE],
    "calc_decode": ["dataset.n=64", "model.hidden_size=8"],
    "sst_treelstm": ["model.hidden_size=8"],
    "sst_treelstm+clip+ema": [
        "model.hidden_size=8",
        "trainer.grad_clip=1",
        "trainer.ema_decay=0.9",
    ],
    "sst_treelstm_glove": ["model.hidden_size=8"],
    "sst_treelstm_glove+tape": ["model.hidden_size=8", _TAPE],
    "sst_treelstm_fold": ["model.hidden_size=8"],
    "sst_treelstm_fold_distill": ["model.hidden_size=8", "model.teacher=[{data}/teacher]"],
    "sst_lstm": _SMALL,
    "text_csv": ["dataset.path={data}/text.csv", *_SMALL],
    "trees_ptb": ["dataset.path={data}/sst", *_SMALL],
    "trees_ptb+child_sum": ["dataset.path={data}/sst", "model=child_sum_tree_lstm", *_SMALL],
    "esol_weave": _WEAVE,
    "esol_weave+mve": [*_WEAVE, "model.uncertainty=mve"],
    "freesolv_weave": _WEAVE,
    "molecules_csv": ["dataset.path={data}/two.csv", "dataset.targets=[a,b]", *_WEAVE],
    "molecules_csv+dmpnn": ["dataset.path={data}/two.csv", "dataset.targets=[a,b]", *_DMPNN],
    "esol_weave+dmpnn+mve": [*_DMPNN, "model.uncertainty=mve"],
    "addition_attention": _SEQUENCES,
    "multiplication_attention": _SEQUENCES,
}


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data root in the real files' layout: SST trees, GloVe-style vectors, two molecule
    CSVs and one of two targets, a text CSV; and a teacher run for distillation."""
    root = tmp_path_factory.mktemp("data")
    (root / "sst").mkdir()
    for split in ("train", "dev", "test"):
        (root / "sst" / f"{split}.txt").write_text("\n".join(_TREES) + "\n")
    (root / "wordvec").mkdir()
    words = sorted({w for t in _TREES for w in t.replace(")", " ").split() if w[0] != "("})
    rng = np.random.default_rng(0)
    with gzip.open(root / "wordvec" / "glove.6B.50d.sst_vocab.txt.gz", "wt") as f:
        f.writelines(f"{w} {' '.join(f'{x:.3f}' for x in rng.normal(size=50))}\n" for w in words)
    (root / "molecules").mkdir()
    values = np.linspace(-3.0, 1.0, len(_SMILES))
    rows = [f"{s},{v:.3f}" for s, v in zip(_SMILES, values)]
    header = "smiles,measured log solubility in mols per litre\n"
    (root / "molecules" / "delaney-processed.csv").write_text(header + "\n".join(rows) + "\n")
    (root / "molecules" / "freesolv.csv").write_text("smiles,expt\n" + "\n".join(rows) + "\n")
    two = [f"{row},{k % 2}" for k, row in enumerate(rows)]
    (root / "two.csv").write_text("smiles,a,b\n" + "\n".join(two) + "\n")
    sentences = ["a good film", "a dull film", "great acting", "awful film", "it is fine"] * 4
    text = [f"{s},{k % 3}" for k, s in enumerate(sentences)]
    (root / "text.csv").write_text("text,label\n" + "\n".join(text) + "\n")
    teacher = ["experiment=sst_treelstm_fold", f"paths.data_dir={root}", "model.hidden_size=8"]
    run_train(compose_config([*teacher, *_RUN[:-3]], root / "teacher"))  # (the CPU's route)
    return root


def test_every_preset_is_counted() -> None:
    presets = {p.stem for p in (Path(CONF_DIR) / "experiment").glob("*.yaml")}
    assert presets <= {case.split("+")[0] for case in CASES}


@pytest.mark.parametrize("case", CASES)
def test_a_training_step_makes_no_host_sync_on_cudas_route(
    case: str, data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = fit._step
    syncs: list[int] = []
    where: Counter = Counter()

    def counted(*args: Any) -> bool:
        result: list[bool] = []
        step = count_ops(lambda: where.update(where_syncs(lambda: result.append(real(*args)))))
        syncs.append(step.syncs)
        return result[0]

    monkeypatch.setattr(fit, "_step", counted)
    monkeypatch.setattr(fit, "read_every", lambda device, ctx: fit.STEPS_PER_READ)  # a GPU's
    monkeypatch.setattr(fit, "SECONDS_PER_READ", math.inf)
    monkeypatch.setattr(sparse_rows, "SPARSE_DEVICES", ())  # a GPU's: dense table gradients
    extra = [o.format(data=data) for o in CASES[case]]
    overrides = [f"experiment={case.split('+')[0]}", f"paths.data_dir={data}", *_RUN, *extra]
    overrides.append(f"paths.cache_dir={data / 'cache'}")
    with cuda_route():
        run_train(compose_config(overrides, tmp_path))
    assert syncs and syncs == [0] * len(syncs), (syncs, where.most_common())
