"""No state lost or stuck after a kill: metrics.csv repaired on resume, damaged molecule caches
rebuilt, killed writes' temporary files cleaned, and files readable as the umask allows."""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from foldexp.data import molecule_cache
from foldexp.data.molecules import load_molecule_csv
from foldexp.train import artifacts
from foldexp.train.app import compose_config
from foldexp.train.loop import run_train
from foldexp.train.rundir import clean_stale_tmp

# ---------------------------------------------------------------------- metrics.csv


def test_resume_rewrites_metrics_csv_a_kill_left_short(
    tiny: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import foldexp.train.fit as fit

    real, calls = fit.write_metrics_csv, []

    def killed_on_second(path: Path, rows: list) -> Path:
        calls.append(len(rows))
        if len(calls) == 2:  # epoch 1: last.pt is written, metrics.csv is not
            raise KeyboardInterrupt
        return real(path, rows)

    monkeypatch.setattr(fit, "write_metrics_csv", killed_on_second)
    with pytest.raises(KeyboardInterrupt):
        run_train(compose_config([*tiny, "trainer.epochs=2"], tmp_path))
    monkeypatch.undo()
    assert len(pd.read_csv(tmp_path / "metrics.csv")) == 1

    resume = [*tiny, "trainer.epochs=2", "trainer.resume=true", "trainer.plots=true"]
    run_train(compose_config(resume, tmp_path))
    metrics = pd.read_csv(tmp_path / "metrics.csv")
    history = torch.load(tmp_path / "checkpoints" / "last.pt", weights_only=True)["progress"]
    assert list(metrics["epoch"]) == [0, 1]
    assert metrics["dev_loss"].tolist() == pytest.approx(
        [r["dev_loss"] for r in history["history"]]
    )
    assert (tmp_path / "loss.png").exists()  # redrawn from the repaired CSV
    assert artifacts.verify_file(tmp_path / "metrics.csv")


# ---------------------------------------------------------------------- molecule cache

CSV = "smiles,y\nCCO,1.5\nc1ccccc1,-2\nCC(=O)O,4\n"


@pytest.fixture
def cached(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(csv, cache file) after a first load filled the cache."""
    csv = tmp_path / "mols.csv"
    csv.write_text(CSV, encoding="utf-8")
    load_molecule_csv(csv, target_columns="y", cache_dir=tmp_path / "cache")
    (entry,) = (tmp_path / "cache").glob("*.npz")
    yield csv, entry


def _key(entry: Path) -> str:
    """The full key a cache file records (the CSV's digest and the reader's options)."""
    with np.load(entry) as z:
        return json.loads(str(z["meta"]))["key"]


def _load_again(csv: Path, caplog: pytest.LogCaptureFixture, why: str) -> None:
    with caplog.at_level(logging.WARNING, logger="foldexp.data.molecule_cache"):
        ds = load_molecule_csv(csv, target_columns="y", cache_dir=csv.parent / "cache")
    assert len(ds) == 3 and ds.smiles[1] == "c1ccccc1"
    assert why in caplog.text and "featurising again" in caplog.text
    caplog.clear()
    (entry,) = (csv.parent / "cache").glob("*.npz")
    assert molecule_cache.read_cache(entry, _key(entry)) is not None  # rewritten whole
    assert not caplog.text


def test_empty_molecule_cache_is_rebuilt(
    cached: tuple[Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    csv, entry = cached
    entry.write_bytes(b"")
    _load_again(csv, caplog, "unreadable")


def test_changed_molecule_cache_is_rebuilt(
    cached: tuple[Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    csv, entry = cached
    with np.load(entry) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["atom_features"] = arrays["atom_features"] + 1  # plausible, wrong
    with open(entry, "wb") as f:
        np.savez(f, **arrays)
    _load_again(csv, caplog, "do not match their checksum")


def test_mis_shaped_molecule_cache_is_rebuilt(
    cached: tuple[Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    csv, entry = cached
    atoms = [np.zeros((3, 44), np.float32)]
    pairs = [np.zeros((2, 2, 14), np.float32)]  # pairs for two atoms, not three
    one = np.zeros((1, 1))
    key = _key(entry)
    molecule_cache.write_cache(entry, ["CCO"], atoms, pairs, one, one > 0, np.zeros(1), [], key)
    _load_again(csv, caplog, "mis-shaped")


def test_mis_shaped_cache_from_the_old_format_is_rebuilt(
    cached: tuple[Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    csv, entry = cached
    with np.load(entry) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["meta"] = np.array('{"format": 1, "atom_dim": 44, "pair_dim": 14}')
    arrays["n_atoms"] = arrays["n_atoms"] + 1
    with open(entry, "wb") as f:
        np.savez(f, **arrays)
    with caplog.at_level(logging.INFO, logger="foldexp.data.molecule_cache"):
        ds = load_molecule_csv(csv, target_columns="y", cache_dir=csv.parent / "cache")
    assert len(ds) == 3 and "another version" in caplog.text


# ---------------------------------------------------------------------- temporary files


def _dead_pid() -> int:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], check=True,
                          capture_output=True, text=True)  # fmt: skip
    return int(proc.stdout)


def test_temporary_files_of_killed_writes_are_removed_on_start(tiny: list[str], run: Path) -> None:
    dead, live = _dead_pid(), os.getppid()
    stale = [
        run / "checkpoints" / f".last.pt.{dead}.k2j4_x9a.tmp",
        run / f".metrics.csv.{dead}.abcdefgh.tmp",
        run / ".results.json.q1w2e3r4.tmp",  # written before temporary names held a PID
    ]
    kept = run / f".results.json.{live}.zzzzzzzz.tmp"  # a live writer's: not ours to remove
    for path in [*stale, kept]:
        path.write_bytes(b"partial")
    run_train(compose_config([*tiny, "trainer.resume=true"], run))
    assert [p for p in stale if p.exists()] == []
    assert kept.exists()
    assert clean_stale_tmp(run) == []


# ---------------------------------------------------------------------- permissions


@pytest.fixture
def umask() -> Iterator[None]:
    old = os.umask(0o027)
    yield
    os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.usefixtures("umask")
def test_files_are_created_as_the_umask_allows(tiny: list[str], tmp_path: Path) -> None:
    run_train(compose_config([*tiny, "trainer.plots=true"], tmp_path / "run"))
    made = [p for p in (tmp_path / "run").rglob("*") if p.is_file()]
    names = {p.name for p in made}
    assert {"results.json", "results.json.sha256", "last.pt", "metrics.csv", "loss.png"} <= names
    assert {p.name: _mode(p) for p in made} == {p.name: 0o640 for p in made}

    csv = tmp_path / "mols.csv"
    csv.write_text(CSV, encoding="utf-8")
    load_molecule_csv(csv, target_columns="y", cache_dir=tmp_path / "cache")
    (entry,) = (tmp_path / "cache").glob("*.npz")
    assert _mode(entry) == 0o640
