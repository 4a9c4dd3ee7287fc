"""``foldexp fingerprint RUN INPUT``: each molecule's readout before the head (``encode``),
with the input's other columns, streamed like ``predict`` (as CSV, or as .npy/.npz with the IDs
in a companion CSV); a model without ``encode`` is refused in one line."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from foldexp.analysis import fingerprint_arrays, predict
from foldexp.cli import main
from foldexp.experiments.molecule_data import molecule_inputs
from foldexp.models.weave import WeaveModel
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
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    sizes = ["model.atom_size=4", "model.pair_size=4", "model.graph_size=4", "model.mlp_size=4"]
    run_dir, path = _train(tmp_path, sizes)
    monkeypatch.delattr(WeaveModel, "encode")  # a model class without one
    with pytest.raises(SystemExit) as exc:
        main(["fingerprint", str(run_dir), str(path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("foldexp fingerprint: error: WeaveModel has no encode(batch)")
    assert err.count("\n") == 1


def test_fingerprint_as_numpy_streams_the_csvs_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir, _ = _train(tmp_path, ["model=dmpnn", "model.hidden_size=6"])
    text = "id,smiles\na,CCO\nb,not_a_smiles\nc,c1ccccc1\nd,CCCCO\ne,OCCO\n"
    (tmp_path / "in.csv").write_text(text)
    main(["fingerprint", str(run_dir), str(tmp_path / "in.csv"), "-o", str(tmp_path / "fp.csv")])
    rows = _csv(tmp_path / "fp.csv")
    expected = np.array(
        [[float(v) if v else np.nan for v in r[2:8]] for r in rows[1:]], dtype=np.float32
    )
    monkeypatch.setattr(predict, "CHUNK_INPUTS", 2)  # three chunks ...
    written, read = [], [0]
    take, items = fingerprint_arrays.NpyRows.take, predict.input_items

    def spy(self: Any, chunk: list[list[Any]], start: int, width: int) -> list[list[Any]]:
        written.append((len(chunk), self.file.tell(), read[0]))  # ... each written as it comes
        return take(self, chunk, start, width)

    def counted(*args: Any) -> Any:  # how many inputs were read when a chunk is written
        name, kept, rows = items(*args)
        return name, kept, (read.__setitem__(0, read[0] + 1) or row for row in rows)

    monkeypatch.setattr(predict, "input_items", counted)

    monkeypatch.setattr(fingerprint_arrays.NpyRows, "take", spy)
    for name in ("fp.npy", "fp.npz"):
        out = tmp_path / name
        assert main(["fingerprint", str(run_dir), str(tmp_path / "in.csv"), "-o", str(out)]) == 0
        got = np.load(out) if name.endswith("npy") else np.load(out)["fingerprints"]
        assert got.dtype == np.float32 and got.shape == (5, 6)
        np.testing.assert_array_equal(got, expected)  # NaN where the CSV is blank
        assert np.isnan(got[1]).all() and not np.isnan(got[[0, 2, 3, 4]]).any()
        ids = _csv(tmp_path / "fp.ids.csv")  # the IDs: the CSV without fp_*
        assert ids == [[r[0], r[1], r[-1]] for r in rows]
    # each chunk's rows at their place in the file, written before the next chunk is read
    assert written[:3] == [(2, 128, 2), (2, 128 + 2 * 6 * 4, 4), (1, 128 + 4 * 6 * 4, 5)]
    with pytest.raises(SystemExit) as exc:  # predictions stay CSV
        main(["predict", str(run_dir), str(tmp_path / "in.csv"), "-o", str(tmp_path / "p.npy")])
    assert exc.value.code == 2 and ".npy and .npz are for foldexp fingerprint" in (
        capsys.readouterr().err
    )
    assert not (tmp_path / "p.npy").exists()


def _csv(path: Path) -> list[list[str]]:
    with path.open() as f:
        return list(csv.reader(f))
