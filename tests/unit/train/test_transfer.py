"""``model.init_from=RUN_DIR`` and ``model.freeze=encoder`` (D-MPNN): the encoder starts from a
trained run on other data and targets, frozen or not; the head is new; a run whose encoder does
not fit, or whose checkpoint was altered, is refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from foldexp.analysis.predict import run_predict
from foldexp.train.app import compose_config
from foldexp.train.loop import run_train
from foldexp.train.runs import load_trained

SMILES = [
    "CCO", "CCCC", "c1ccccc1", "CC(=O)O", "CCN", "OCCO", "c1ccncc1", "CC(C)O", "ClCCl",
    "CCOCC", "C1CCCCC1", "c1ccc2ccccc2c1", "CC#N", "CCCl", "O=C1CCCCC1", "Cc1ccccc1",
]  # fmt: skip
ENCODER = ("w_i.weight", "w_h.weight", "w_o.weight", "w_o.bias")


def _run(tmp_path: Path, name: str, column: str, *extra: str) -> Path:
    path = tmp_path / f"{column}.csv"
    rows = [f"{s},{(len(s) * (3 if column == 'a' else 7)) % 5}" for s in SMILES]
    path.write_text(f"smiles,{column}\n" + "\n".join(rows) + "\n")
    args = ["experiment=molecules_csv", "model=dmpnn", "model.hidden_size=12",
            f"dataset.path={path}", f"dataset.targets=[{column}]", "trainer.epochs=2",
            "trainer.plots=false", "trainer.progress=false",
            f"paths.cache_dir={tmp_path / 'cache'}", *extra]  # fmt: skip
    run_train(compose_config(args, output_dir=tmp_path / name))
    return tmp_path / name


def test_frozen_encoder_is_the_source_runs_and_the_head_trains(tmp_path: Path) -> None:
    source = _run(tmp_path, "source", "a")
    frozen = _run(tmp_path, "frozen", "b", f"model.init_from={source}", "model.freeze=encoder")
    free = _run(tmp_path, "free", "b", f"model.init_from={source}", "seed=0")
    fresh = _run(tmp_path, "fresh", "b", "seed=0")
    s, f = load_trained(source).model.state_dict(), load_trained(frozen).model.state_dict()
    free_state = load_trained(free).model.state_dict()
    fresh_state = load_trained(fresh).model.state_dict()
    for name in ENCODER:
        assert torch.equal(f[name], s[name]), name  # frozen: the source's, exactly
        assert not torch.equal(free_state[name], s[name]), name  # trained on from there
        assert not torch.equal(free_state[name], fresh_state[name]), name  # not from scratch
    # the head is this run's: new targets' statistics, trained weights
    assert f["target_mean"].tolist() != s["target_mean"].tolist()
    assert not torch.equal(f["ffn.4.weight"], s["ffn.4.weight"])
    rows = run_predict(frozen, str(tmp_path / "b.csv"))
    assert len(rows) == len(SMILES) and all(r["error"] == "" and r["b"] != "" for r in rows)


def test_init_from_refusals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = _run(tmp_path, "source", "a")
    with pytest.raises(ValueError, match=r"w_i\.weight is \[12, \d+\] there, \[16, \d+\] here"):
        _run(tmp_path, "wide", "b", f"model.init_from={source}", "model.hidden_size=16")
    with pytest.raises(ValueError, match="model.freeze=encoder .* needs model.init_from"):
        _run(tmp_path, "nofrom", "b", "model.freeze=encoder")
    best = source / "checkpoints" / "best.pt"
    data = bytearray(best.read_bytes())
    data[-10] ^= 0xFF  # one flipped byte: its checksum no longer matches
    best.write_bytes(bytes(data))
    with pytest.raises(Exception, match=r"best\.pt"):
        _run(tmp_path, "tampered", "b", f"model.init_from={source}")
    with pytest.raises(FileNotFoundError, match="not a trained run"):
        _run(tmp_path, "missing", "b", f"model.init_from={tmp_path / 'nowhere'}")
