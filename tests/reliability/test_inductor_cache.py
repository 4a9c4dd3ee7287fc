"""Inductor's on-disk cache (``device.compile=inductor``) is used only where nothing in it can
have come from someone else: a file another user could have written, or a link, and the cache
is not used at all (nothing compiled, nothing loaded from it), said once in the log."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from foldexp.executor import inductor


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private kernel cache of the test's; Inductor's folder beside it, checked afresh."""
    kernels = tmp_path / "home" / "kernels"
    kernels.parent.mkdir(mode=0o700)
    monkeypatch.setenv("FOLDEXP_KERNEL_CACHE", str(kernels))
    monkeypatch.setattr(inductor, "_cache_ready", None)
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    folder = inductor.inductor_cache_dir()
    assert folder == tmp_path / "home" / "inductor"
    return folder


def test_a_clean_private_cache_is_used(cache: Path) -> None:
    assert inductor._prepare_cache()
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(cache)
    assert cache.stat().st_mode & 0o077 == 0


@pytest.mark.parametrize("plant", ["writable", "link", "writable folder"])
def test_a_planted_file_keeps_the_cache_unused(
    cache: Path, plant: str, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    cache.mkdir(mode=0o700, parents=True)
    target = cache / "fx" / "planted.py"
    target.parent.mkdir(mode=0o700)
    if plant == "writable":
        target.write_text("raise SystemExit('the planted module ran')\n")
        target.chmod(0o666)
    elif plant == "link":
        (tmp_path / "elsewhere.py").write_text("x = 1\n")
        target.symlink_to(tmp_path / "elsewhere.py")
    else:
        target.parent.chmod(0o777)
    with caplog.at_level(logging.WARNING, logger="foldexp.executor.inductor"):
        assert not inductor._prepare_cache()
    assert "TORCHINDUCTOR_CACHE_DIR" not in os.environ
    assert (
        "Inductor's cache is not used" in caplog.text
        and "planted" in caplog.text
        or (plant == "writable folder" and "fx" in caplog.text)
    )
