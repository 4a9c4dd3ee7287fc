"""Issue 52's Low rows: each is one line with status 2, or a warning and the safe default.

Before: ``model=null`` (``dataset``, ``optimizer``, ``device``) and ``~model`` were Hydra
tracebacks or "dictionary update sequence element #0 has length 1"; ``model._target_=pkg.mod``
imported ``pkg.mod`` (running its import side effects) before refusing it; ``WORLD_SIZE=0`` was a
traceback and ``WORLD_SIZE=abc`` / ``LOCAL_WORLD_SIZE=abc`` "invalid literal for int()" naming
no variable; a cgroup path with non-ASCII bytes, ``cpu.max = "100000 0"`` or a 400-digit quota
ended the run in a traceback.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from foldexp.cli import main
from foldexp.cpus import cgroup_cpus

TINY = ["dataset.n=40", "trainer.epochs=1", "trainer.progress=false", "trainer.plots=false"]


def _train(args: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    try:
        code = main(["train", *TINY, *args, f"hydra.run.dir={tmp_path / 'run'}"])
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize(
    "override", ["model=null", "dataset=null", "optimizer=null", "device=null", "~model",
                 "~dataset", "~optimizer", "model=", "+model=null", "~model=tree_lstm"],
)  # fmt: skip
def test_a_required_group_set_to_nothing_is_one_line(
    override: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    group = override.strip("~+").split("=")[0]
    err = _train([override], tmp_path, capsys)
    assert f"{override}:" in err and f"{group}=" in err, err  # names it, and what to give


def test_a_target_naming_a_module_is_refused_before_it_is_imported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "sidefx"
    package.mkdir()
    (package / "__init__.py").write_text("")
    marker = tmp_path / "IMPORTED"
    (package / "mod.py").write_text(f"open({str(marker)!r}, 'w').close()\ns = 'text'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    err = _train(["model._target_=sidefx.mod.s"], tmp_path, capsys)  # as this.s: a str
    assert "sidefx.mod" in err and "no class s" in err, err
    assert not marker.exists() and "sidefx.mod" not in sys.modules


@pytest.mark.parametrize(
    ("variable", "value"),
    [("WORLD_SIZE", "0"), ("WORLD_SIZE", "abc"), ("LOCAL_WORLD_SIZE", "abc"), ("RANK", "-1")],
)
def test_a_bad_launcher_variable_is_named(
    variable: str,
    value: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(variable, value)
    if variable == "RANK":  # read only under a launcher: with a world of 2
        monkeypatch.setenv("WORLD_SIZE", "2")
        err = _train(["trainer.strategy=ddp"], tmp_path, capsys)
    else:
        err = _train([], tmp_path, capsys)
    assert f"{variable}={value!r}" in err, err


def _cgroup(tmp_path: Path, proc: bytes, files: dict[str, str]) -> float | None:
    root = tmp_path / "cgroup"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    path = tmp_path / "proc_self_cgroup"
    path.write_bytes(proc + b"\n")
    return cgroup_cpus(root, path)


@pytest.mark.parametrize(
    ("proc", "files", "warned"),
    [
        (b"0::/caf\xc3\xa9/\xff", {"cpu.max": "200000 100000"}, False),  # non-ASCII: read
        (b"0::/", {"cpu.max": "100000 0"}, True),
        (b"0::/", {"cpu.max": "9" * 400 + " 100000"}, True),
        (b"4:cpu:/", {"cpu/cpu.cfs_quota_us": "9" * 400, "cpu/cpu.cfs_period_us": "1"}, True),
        (b"4:cpu:/", {"cpu/cpu.cfs_quota_us": "100000", "cpu/cpu.cfs_period_us": "0"}, True),
    ],
)
def test_a_cgroup_file_that_is_no_quota_falls_back_with_a_warning(
    proc: bytes,
    files: dict[str, str],
    warned: bool,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="foldexp.cpus"):
        quota = _cgroup(tmp_path, proc, files)
    if warned:
        assert quota is None and "not a CPU quota" in caplog.text
    else:
        assert quota == 2.0 and not caplog.text


def test_a_class_reached_by_a_star_import_or_under_an_if_is_still_a_class(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Second pass: the source check must not refuse a user's model class that its module
    re-exports (``from .models import *``) or defines under ``if``/``try``."""
    from foldexp.config.targets import undefined_class

    package = tmp_path / "mine"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "star.py").write_text("from os.path import *\n")
    (package / "nested.py").write_text(
        "try:\n    class Model:\n        pass\nexcept E:\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert undefined_class("mine.star.Model") is None
    assert undefined_class("mine.nested.Model") is None
    assert "no class Other" in str(undefined_class("mine.nested.Other"))


def test_fused_cells_required_where_they_cannot_build_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from foldexp.kernels import native

    monkeypatch.setattr(native, "load_kernels", lambda: None)
    monkeypatch.setattr(native, "build_failure", lambda: "no C++ compiler (g++, c++, clang++)")
    err = _train(["device.fused_cells=true"], tmp_path, capsys)
    assert "device.fused_cells=true" in err and "device.fused_cells=null" in err
    assert "Traceback" not in err
