"""Unit tests for fetch/import (network mocked, never used), the stats command and the CLI."""

from __future__ import annotations

import zipfile

import pooch
import pytest

from foldexp.data import commands, fetch
from foldexp.data.cli import main
from foldexp.data.errors import DataWarning, FetchError, TreeParseError
from foldexp.data.sst import load_sst

TREES = {
    "train": "(3 (2 It) (4 (2 is) (4 good)))\n(1 (2 Not) (1 good))\n",
    "dev": "(2 (2 So) (2 so))\n",
    "test": "(4 (2 -LRB-) (4 great))\n",
}


@pytest.fixture
def sst_zip(tmp_path):
    path = tmp_path / "trainDevTestTrees_PTB.zip"
    with zipfile.ZipFile(path, "w") as z:
        for split, text in TREES.items():
            z.writestr(f"trees/{split}.txt", text)
    return path


def offline(*args, **kwargs):
    raise ConnectionError("Failed to resolve 'nlp.stanford.edu' (no network)")


@pytest.mark.parametrize("name", ["sst", "esol", "freesolv"])
def test_fetch_offline_says_what_to_do(tmp_path, monkeypatch, name):
    monkeypatch.setattr(pooch, "retrieve", offline)
    with pytest.raises(FetchError) as info:
        fetch.fetch(name, tmp_path / "data")
    message = str(info.value)
    assert f"could not download {name}" in message and "offline" in message
    assert f"foldexp data import {name} PATH/" in message
    assert str(tmp_path / "data") in message


def test_fetch_offline_cli_exit_code(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(pooch, "retrieve", offline)
    assert main(["--data-dir", str(tmp_path), "fetch", "sst"]) == 2
    err = capsys.readouterr().err
    assert "foldexp data fetch: error: could not download sst" in err
    assert "foldexp data import sst" in err


def test_fetch_skips_present_dataset(tmp_path, monkeypatch, sst_zip):
    with pytest.warns(DataWarning):  # tiny fake treebank: counts differ from the release
        fetch.import_dataset("sst", sst_zip, tmp_path)
    monkeypatch.setattr(pooch, "retrieve", offline)
    assert fetch.fetch("sst", tmp_path) == tmp_path  # no download attempted


def test_fetch_uses_downloaded_file(tmp_path, monkeypatch, sst_zip):
    calls = []

    def fake_retrieve(url, known_hash=None, fname=None, path=None, progressbar=False):
        calls.append((url, known_hash, fname))
        return str(sst_zip)

    monkeypatch.setattr(pooch, "retrieve", fake_retrieve)
    with pytest.warns(DataWarning):
        fetch.fetch("sst", tmp_path / "data")
    assert calls == [(fetch.DATASETS["sst"].url, None, "trainDevTestTrees_PTB.zip")]
    assert len(load_sst("train", tmp_path / "data")) == 2


def test_fetch_pins_esol_checksum(tmp_path, monkeypatch):
    seen = {}

    def fake_retrieve(url, known_hash=None, **kwargs):
        seen["hash"] = known_hash
        raise ValueError("SHA256 hash of downloaded file does not match the known hash")

    monkeypatch.setattr(pooch, "retrieve", fake_retrieve)
    with pytest.raises(FetchError, match="not the expected file"):
        fetch.fetch("esol", tmp_path)
    assert seen["hash"] == "sha256:" + fetch.DATASETS["esol"].sha256


def test_import_sst_zip_and_folder(tmp_path, sst_zip):
    with pytest.warns(DataWarning, match="train.txt has 2 trees, the release 8544"):
        fetch.import_dataset("sst", sst_zip, tmp_path / "a")
    assert [t.label for t in load_sst("train", tmp_path / "a")] == [3, 1]
    folder = tmp_path / "plain"
    folder.mkdir()
    for split, text in TREES.items():
        (folder / f"{split}.txt").write_text(text, encoding="utf-8")
    with pytest.warns(DataWarning):
        fetch.import_dataset("sst", folder, tmp_path / "b")
    assert load_sst("test", tmp_path / "b")[0].words() == ["-LRB-", "great"]
    leftovers = [p.name for p in (tmp_path / "b").iterdir()]
    assert leftovers == ["sst"]  # staging folder removed


def test_import_rejects_broken_input(tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    for split, text in TREES.items():
        (broken / f"{split}.txt").write_text(text, encoding="utf-8")
    (broken / "dev.txt").write_text("(2 (2 So) (2 so)\n", encoding="utf-8")
    with pytest.raises(TreeParseError, match=r"dev\.txt:1:17: expected '\)'"):
        fetch.import_dataset("sst", broken, tmp_path / "data")
    assert not (tmp_path / "data" / "sst").exists()  # nothing half-installed
    (broken / "dev.txt").unlink()
    with pytest.raises(FetchError, match="has no dev.txt"):
        fetch.import_dataset("sst", broken, tmp_path / "data")
    with pytest.raises(FetchError, match="does not exist"):
        fetch.import_dataset("sst", tmp_path / "missing.zip", tmp_path / "data")
    with pytest.raises(FetchError, match="unknown dataset"):
        fetch.import_dataset("mnist", broken, tmp_path / "data")


def test_import_molecule_csv(tmp_path):
    csv = tmp_path / "esol.csv"
    csv.write_text(
        "Compound ID,measured log solubility in mols per litre,smiles\n"
        "ethanol,1.1,CCO\nbenzene,-1.6,c1ccccc1\n",
        encoding="utf-8",
    )
    with pytest.warns(DataWarning, match="it has 2 molecules, the reference copy 1128"):
        fetch.import_dataset("esol", csv, tmp_path / "data")
    assert (tmp_path / "data" / "molecules" / "delaney-processed.csv").read_bytes() == (
        csv.read_bytes()
    )
    bad = tmp_path / "bad.csv"
    bad.write_text("smiles,expt\nC1CC,1\n", encoding="utf-8")
    with pytest.raises(FetchError, match=r"cannot import freesolv .*bad\.csv.*'C1CC'"):
        fetch.import_dataset("freesolv", bad, tmp_path / "data")


def test_stats_command_writes_table_and_png(tmp_path, sst_zip, capsys):
    with pytest.warns(DataWarning):
        fetch.import_dataset("sst", sst_zip, tmp_path)
    assert commands.stats_command("sst", tmp_path, tmp_path / "out") == 0
    out = capsys.readouterr().out
    assert "| split | trees | nodes |" in out and "| train | 2 | 8 |" in out
    png = tmp_path / "out" / "sst.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_help_and_errors(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    for word in ("fetch", "import", "stats", "FOLDEXP_DATA", "sst", "esol", "freesolv"):
        assert word in text
    with pytest.raises(SystemExit):
        main(["fetch", "imagenet"])
    assert "invalid choice" in capsys.readouterr().err
    assert main(["--data-dir", str(tmp_path), "stats", "sst"]) == 2
    assert "foldexp data import sst" in capsys.readouterr().err


def test_cli_import(tmp_path, sst_zip, capsys):
    with pytest.warns(DataWarning):
        assert main(["--data-dir", str(tmp_path), "import", "sst", str(sst_zip)]) == 0
    assert "sst: imported from" in capsys.readouterr().out
