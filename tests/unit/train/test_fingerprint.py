"""``foldexp fingerprint RUN INPUT``: each molecule's readout before the head (``encode``),
with the input's other columns, streamed like ``predict``; a model without ``encode`` is
refused in one line."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch

from foldexp.analysis import predict
from foldexp.cli import main
from foldexp.experiments.molecule_data import molecule_inputs
from foldexp.train.app import compose_config
from foldexp.train.loop import run_train
from foldexp.train.runs import load_trained

SMILES = [
    "CCO", "CCCC", "c1ccccc1", "CC(=O)O", "CCN", "OCCO", "c1ccncc1", "CC(C)O", "ClCCl",
    "CCOCC", "C1CCCCC1", "c1ccc2ccccc2c1", "CC#N", "CCCl", "O=C1CCCCC1", "Cc1ccccc1",
]  # fmt: skip


def _train(tmp_path: Path, model: list[str]) -> tuple[Path, Path]:
    path = tmp_path / "mols.csv"
    rows = [f"m{k},{s},{0.3 * len(s):.2f}" for k, s in enumerate(SMILES)]
    path.write_text("id,smiles,y\n" + "\n".join(rows) + "\n")
    args = ["experiment=molecules_csv", f"dataset.path={path}", "dataset.targets=[y]",
            "trainer.epochs=1", "trainer.plots=false", "trainer.progress=false",
            f"paths.cache_dir={tmp_path / 'cache'}", *model]  # fmt: skip
    run_train(compose_config(args, output_dir=tmp_path / "run"))
    return tmp_path / "run", path


def test_fingerprint_writes_the_encoder_readout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir, path = _train(tmp_path, ["model=dmpnn", "model.hidden_size=12"])
    (tmp_path / "in.csv").write_text("id,smiles\na,CCO\nb,not_a_smiles\nc,c1ccccc1\n")
    monkeypatch.setattr(predict, "CHUNK_INPUTS", 2)  # two chunks: streamed
    out = tmp_path / "fp.csv"
    assert main(["fingerprint", str(run_dir), str(tmp_path / "in.csv"), "-o", str(out)]) == 0
    with out.open() as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["smiles", "id", *[f"fp_{k}" for k in range(12)], "error"]
    assert [r[1] for r in rows[1:]] == ["a", "b", "c"]
    assert rows[2][2:14] == [""] * 12 and rows[2][14]  # the bad SMILES: its row's error
    model = load_trained(run_dir).model
    graphs = [g for g, _ in molecule_inputs(["CCO", "c1ccccc1"])]
    with torch.no_grad():
        expected = model.encode(model.collate(graphs))
    got = torch.tensor([[float(v) for v in rows[k][2:14]] for k in (1, 3)])
    assert torch.allclose(got, expected, atol=1e-6)
    assert not torch.allclose(got[0], got[1])  # two molecules, two representations


def test_fingerprint_refuses_a_model_without_encode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sizes = ["model.atom_size=4", "model.pair_size=4", "model.graph_size=4", "model.mlp_size=4"]
    run_dir, path = _train(tmp_path, sizes)
    with pytest.raises(SystemExit) as exc:
        main(["fingerprint", str(run_dir), str(path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("foldexp fingerprint: error: WeaveModel has no encode(batch)")
    assert err.count("\n") == 1
