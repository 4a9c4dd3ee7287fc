"""The featurisation cache is bounded (``foldexp.data.cache_bound``): a 125 KB CSV left a 90 MB
file, another per option set, never removed. A size cap (``FOLDEXP_CACHE_MAX_MB``) removes the
files used longest ago first; ``foldexp data cache`` lists them and ``--clear`` removes them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from foldexp.data.cache_bound import bound_cache, cache_files, default_cache_dir
from foldexp.data.cli import main as data_main
from foldexp.data.molecules import load_molecule_csv
from foldexp.train.app import compose_config

MB = 2**20


def _file(folder: Path, name: str, mb: int, used: int) -> Path:
    path = folder / name
    path.write_bytes(b"\0" * (mb * MB))
    os.utime(path, (used, used))
    return path


def test_the_files_used_longest_ago_go_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FOLDEXP_CACHE_MAX_MB", "3")
    old, mid, new = (
        _file(tmp_path, f"{n}.npz", 1, t) for n, t in [("a", 10), ("b", 20), ("c", 30)]
    )
    other = _file(tmp_path, "notes.txt", 2, 1)  # not the cache's: neither counted nor removed
    (tmp_path / "link.npz").symlink_to(other)  # a link is not a cache file either
    just = _file(tmp_path, "d.npz", 2, 5)  # the file just written, however old its time
    assert bound_cache(tmp_path, keep=just) == [old, mid]  # 5 MB -> 3 MB: the two oldest go
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.npz", "d.npz", "link.npz", "notes.txt"]
    assert new.exists() and other.exists()


def test_a_file_bigger_than_the_cap_is_not_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("FOLDEXP_CACHE_MAX_MB", "1")
    big = _file(tmp_path, "big.npz", 2, 1)
    assert bound_cache(tmp_path, keep=big) == [big]
    assert "more than the cache may hold (FOLDEXP_CACHE_MAX_MB=1 MB): not kept" in caplog.text


def test_reading_marks_a_use_and_the_cap_holds_for_real_caches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    csv = tmp_path / "a.csv"
    csv.write_text("smiles,y,z\nCCO,1.5,1\nc1ccccc1,-2,0\nCC(=O)O,4,1\n")
    load_molecule_csv(csv, target_columns="y", cache_dir=cache)
    (y_file,) = (f.path for f in cache_files(cache))
    load_molecule_csv(csv, target_columns="z", cache_dir=cache)  # another option set: a file
    (z_file,) = (f.path for f in cache_files(cache) if f.path != y_file)
    for f in (y_file, z_file):
        os.utime(f, (100, 100))
    load_molecule_csv(csv, target_columns="y", cache_dir=cache)  # read from the cache: a use
    assert y_file.stat().st_mtime > 100 and z_file.stat().st_mtime == 100
    assert [f.path for f in cache_files(cache)] == [z_file, y_file]  # z's goes first
    monkeypatch.setenv("FOLDEXP_CACHE_MAX_MB", "0")  # no cache at all
    load_molecule_csv(csv, target_columns=["y", "z"], cache_dir=cache)  # a third: over the cap
    assert cache_files(cache) == []


def test_the_cache_command_lists_and_clears(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _file(tmp_path, "a-0123.npz", 1, 1)
    _file(tmp_path, "a-0123.npz.x1.tmp", 1, 1)  # left by an interrupted write
    (tmp_path / "mine.txt").write_text("kept")
    assert data_main(["cache", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "a-0123.npz" in out and f"{tmp_path}: 2 file(s), 2.0 MB of at most 2048 MB" in out
    assert data_main(["cache", "--clear", "--dir", str(tmp_path)]) == 0
    assert f"removed 2 cache file(s), 2.0 MB, from {tmp_path}" in capsys.readouterr().out
    assert [p.name for p in tmp_path.iterdir()] == ["mine.txt"]


@pytest.mark.parametrize(
    "env",
    [{}, {"FOLDEXP_CACHE": "/c/f"}, {"XDG_CACHE_HOME": "/x"}, {"XDG_CACHE_HOME": "", "HOME": "/h"}],
)
def test_the_default_folder_is_the_configs(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("FOLDEXP_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert str(default_cache_dir()) == compose_config().paths.cache_dir
