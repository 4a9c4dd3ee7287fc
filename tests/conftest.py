"""Shared fixtures: seeded RNGs, the real-data root (``FOLDEXP_DATA``) and the composition of
presets that name its files, the oneDNN switch, the ``foldexp`` command and Triton's
interpreter in a subprocess."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch


@pytest.fixture(autouse=True)
def _seeded() -> None:
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _compile_mode_restored() -> Iterator[None]:
    """``device.compile`` is a process-wide setting that a run sets: put back after each test."""
    from foldexp.executor import capture

    old = capture._mode
    yield
    capture.set_compile_mode(old)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


@pytest.fixture
def restore_onednn() -> Iterator[None]:
    """Puts ``foldexp.kernels``' oneDNN switch back as it was (a test or a run may flip it)."""
    from foldexp.kernels import onednn_enabled, set_onednn_enabled

    old = onednn_enabled()
    yield
    set_onednn_enabled(old)


@pytest.fixture
def data_root() -> Path:
    """The real data folder; tests that need it are skipped when FOLDEXP_DATA is unset."""
    root = os.environ.get("FOLDEXP_DATA")
    if not root or not Path(root).is_dir():
        pytest.skip("FOLDEXP_DATA is not set to a data folder")
    return Path(root)


@pytest.fixture
def compose_or_skip() -> Callable[..., Any]:
    """``compose(overrides, output_dir=None)``: ``compose_config``, skipping the test, saying
    why, when the config names a data file this machine lacks (``sst_treelstm_glove``'s GloVe
    vectors) and ``FOLDEXP_DATA`` is unset: a bare clone has no data folder. With
    ``FOLDEXP_DATA`` set, a missing file fails the test."""
    from foldexp.config.errors import MissingFileError
    from foldexp.train.app import compose_config

    def compose(overrides: list[str], output_dir: Path | None = None) -> Any:
        try:
            return compose_config(overrides, output_dir=output_dir)
        except MissingFileError as err:
            if os.environ.get("FOLDEXP_DATA"):
                raise
            pytest.skip(f"needs the data folder (FOLDEXP_DATA is unset): {err}")

    return compose


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="no CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def _foldexp_command() -> list[str]:
    exe = shutil.which("foldexp", path=str(Path(sys.executable).parent))
    return [exe] if exe else [sys.executable, "-m", "foldexp"]


@pytest.fixture
def run_foldexp() -> Callable[..., subprocess.CompletedProcess]:
    """Runs the installed ``foldexp`` command in a subprocess; fails the test on a non-zero exit
    with the tail of its output."""

    def run(args: list[str], cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
        env = {**os.environ, "MPLBACKEND": "Agg"}
        proc = subprocess.run(
            [*_foldexp_command(), *args],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if check:
            assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
        return proc

    return run


@pytest.fixture
def in_triton_interpreter() -> Callable[[Path, str], str]:
    """Runs ``code`` in a subprocess under ``TRITON_INTERPRET=1`` (Triton's kernels on CPU
    tensors), with the repository and ``folder`` (a test's own, to import its helpers) on the
    path; fails the test on a non-zero exit with its error's tail, else returns its stdout. The
    caller skips where Triton is absent."""
    root = Path(__file__).resolve().parents[1]

    def run(folder: Path, code: str) -> str:
        env = {**os.environ, "TRITON_INTERPRET": "1"}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH", "")) if p)
        code = f"import sys; sys.path.insert(0, {str(folder)!r}); {code}"
        proc = subprocess.run(
            [sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc.stdout

    return run


@pytest.fixture(scope="session")
def toy_bench() -> list[str]:
    """``foldexp bench`` overrides for a run of a few seconds (shared by the bench unit tests and
    the CLI smoke test)."""
    return [
        "bench.state_size=8",
        "bench.leaves=6",
        "bench.vocab_size=6",
        "bench.batch_sizes=[4,1]",
        "bench.train_batch_sizes=[2,1]",
        "bench.repeats=2",
        "bench.warmup_trees=2",
        "bench.boost_below=0",
        "bench.progress=false",
        "bench.scaling.leaves=[4,8]",
        "bench.scaling.state_size=4",
        "bench.scaling.batch_size=2",
        "device.threads=1",
    ]
