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


class _Isa:
    """Stands in for one of Inductor's instruction sets."""

    def __init__(self, flags: str) -> None:
        self.flags = flags

    def build_arch_flags(self) -> str:
        return self.flags


@pytest.fixture
def probes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, list[str]]:
    """Inductor's probe replaced by one that records its calls (``-mbad`` fails); the machine's
    key fixed."""
    from torch._inductor import cpu_vec_isa

    calls: list[str] = []

    def probe(self: _Isa, code: str) -> bool:
        calls.append(self.flags)
        return self.flags != "-mbad"

    monkeypatch.setattr(cpu_vec_isa.VecISA, "check_build", probe)
    monkeypatch.setattr(inductor, "_machine_key", lambda: "this machine")
    return tmp_path / inductor.PROBES, calls


def _probe(flags: str) -> bool:
    from torch._inductor import cpu_vec_isa

    return cpu_vec_isa.VecISA.check_build(_Isa(flags), "int main() {}")


def _new_process(path: Path) -> None:
    """What a new process sees: the original probe, then ours installed over it."""
    from torch._inductor import cpu_vec_isa

    cpu_vec_isa.VecISA.check_build = cpu_vec_isa.VecISA.check_build.original
    inductor.remember_isa_probes(path)


def test_a_probe_that_passed_is_not_repeated_in_the_next_process(probes) -> None:
    path, calls = probes
    inductor.remember_isa_probes(path)
    assert _probe("-mavx2") and not _probe("-mbad")
    assert calls == ["-mavx2", "-mbad"]
    assert path.stat().st_mode & 0o077 == 0
    _new_process(path)
    assert _probe("-mavx2") and not _probe("-mbad")
    assert calls == ["-mavx2", "-mbad", "-mbad"]  # a failure is probed again


@pytest.mark.parametrize("damage", ["another machine's", "not json", "a list"])
def test_another_machines_or_a_broken_file_is_probed_afresh(probes, damage: str) -> None:
    path, calls = probes
    inductor.remember_isa_probes(path)
    _probe("-mavx2")
    content = {
        "another machine's": path.read_text().replace("this machine", "another"),
        "not json": "{",
        "a list": "[1]",
    }[damage]
    path.write_text(content)
    _new_process(path)
    assert _probe("-mavx2")
    assert calls == ["-mavx2", "-mavx2"]
