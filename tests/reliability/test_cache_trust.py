"""The molecule featurisation cache is trusted only as the kernel cache is, and tied to the CSV's
digest; an empty cache variable means the default (issue 52, rows 9 and 10).

Before: a cache folder anyone could write to was used without a word, a cache file was read if
its own recorded checksum matched (which whoever wrote it also writes), so a file put at another
CSV's cache name gave that CSV its targets; ``FOLDEXP_CACHE=`` or ``XDG_CACHE_HOME=`` (set,
empty) put the cache at the filesystem's root.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pytest

from foldexp.data.molecules import load_molecule_csv
from foldexp.train.app import compose_config

A = "smiles,y\nCCO,1.5\nc1ccccc1,-2\nCC(=O)O,4\n"
B = "smiles,y\nCCO,100\nc1ccccc1,200\nCC(=O)O,300\n"


def _load(csv: Path, cache: Path, caplog: pytest.LogCaptureFixture) -> list[float]:
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="foldexp.data.molecule_cache"):
        ds = load_molecule_csv(csv, target_columns="y", cache_dir=cache)
    return [float(g.targets[0]) for g in ds.graphs]


def _entries(cache: Path) -> list[Path]:
    return sorted(cache.glob("*.npz")) if cache.is_dir() else []


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o757])
def test_a_cache_folder_others_can_write_is_not_used(
    mode: int, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    csv = tmp_path / "a.csv"
    csv.write_text(A)
    cache = tmp_path / "shared"
    cache.mkdir()
    cache.chmod(mode)
    assert _load(csv, cache, caplog) == [1.5, -2.0, 4.0]
    assert _entries(cache) == []  # nothing written there
    assert "not a private folder of this user" in caplog.text and "not used" in caplog.text


def test_a_folder_above_that_others_can_write_makes_it_unused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    csv = tmp_path / "a.csv"
    csv.write_text(A)
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)  # no sticky bit: anyone may replace what is inside
    cache = open_dir / "cache"
    _load(csv, cache, caplog)
    assert _entries(cache) == [] and "is writable by others" in caplog.text


def test_a_cache_file_of_another_csv_is_not_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    a.write_text(A)
    b.write_text(B)
    cache = tmp_path / "cache"
    _load(a, cache, caplog)
    (entry_a,) = _entries(cache)
    _load(b, cache, caplog)
    entry_b = next(p for p in _entries(cache) if p != entry_a)
    shutil.copyfile(entry_a, entry_b)  # a's features and targets under b's name
    assert _load(b, cache, caplog) == [100.0, 200.0, 300.0]
    assert "its key differs" in caplog.text


@pytest.mark.parametrize("how", ["writable by others", "a symbolic link"])
def test_a_cache_file_others_could_write_is_not_read(
    how: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    a = tmp_path / "a.csv"
    a.write_text(A)
    cache = tmp_path / "cache"
    _load(a, cache, caplog)
    (entry,) = _entries(cache)
    if how == "writable by others":
        entry.chmod(0o666)
    else:
        real = tmp_path / "elsewhere.npz"
        entry.rename(real)
        entry.symlink_to(real)
    assert _load(a, cache, caplog) == [1.5, -2.0, 4.0]
    assert "not trusted" in caplog.text or "unreadable" in caplog.text, caplog.text


@pytest.mark.parametrize("variable", ["FOLDEXP_CACHE", "XDG_CACHE_HOME"])
def test_an_empty_cache_variable_means_the_default(
    variable: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("FOLDEXP_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    default = compose_config([]).paths.cache_dir
    assert default == os.path.join(tmp_path, ".cache", "foldexp", "data")
    monkeypatch.setenv(variable, "")
    assert compose_config([]).paths.cache_dir == default
