"""Shared by the fault-injection tests: a run small enough to train in seconds, one finished
run that tests copy before they damage it, and the limits of a memory-capped child process."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from foldexp.train.app import compose_config
from foldexp.train.loop import run_train


@pytest.fixture(scope="session")
def capped_child() -> Callable[[int], tuple[dict[str, str], int]]:
    """``capped(extra)`` -> the environment and the address-space cap (``RLIMIT_AS``, bytes) of
    a ``foldexp`` child process that may map ``extra`` bytes past what a bare ``foldexp``
    command maps. The cap is measured, not fixed: a CUDA build of torch maps gigabytes of
    libraries and numpy's OpenBLAS a buffer per core (a fixed 3 GB cap failed every such child
    at import on a 16-core GPU host). No GPU is visible to the child: the cap is about host
    memory, and CUDA cannot start under one."""
    env = {k: v for k, v in os.environ.items() if k != "FOLDEXP_TRACEBACK"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    code = "import foldexp.cli; print(open('/proc/self/status').read())"
    status = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout
    baseline = int(re.search(r"VmPeak:\s+(\d+) kB", status)[1]) * 1024

    def capped(extra: int) -> tuple[dict[str, str], int]:
        return env, baseline + extra

    return capped


@pytest.fixture(scope="session")
def tiny() -> list[str]:
    """Overrides for a one-epoch run of the default experiment that trains in seconds."""
    return [
        "dataset.n=60",
        "trainer.epochs=1",
        "trainer.batch_size=16",
        "trainer.progress=false",
        "trainer.plots=false",
        "model.hidden_size=8",
        "model.embed_size=4",
    ]


@pytest.fixture(scope="session")
def finished(tiny: list[str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished ``tiny`` run, shared by every test: read it, or copy it (``run``) to change."""
    out = tmp_path_factory.mktemp("finished")
    run_train(compose_config(tiny, out))
    return out


@pytest.fixture
def run(finished: Path, tmp_path: Path) -> Path:
    """A copy of ``finished`` of the test's own."""
    copy = tmp_path / "run"
    shutil.copytree(finished, copy)
    return copy


@pytest.fixture(scope="session")
def text_classifier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A trained ``text_csv`` run of two classes (pos, neg), for tests that predict text."""
    root = tmp_path_factory.mktemp("text_classifier")
    rows = [("a good film", "pos"), ("great fun", "pos"), ("a dull film", "neg"), ("awful", "neg")]
    data = root / "train.csv"
    data.write_text("text,label\n" + "".join(f"{t},{y}\n" for t, y in rows * 4))
    overrides = ["experiment=text_csv", f"dataset.path={data}", "trainer.epochs=1",
                 "trainer.batch_size=4", "trainer.progress=false", "trainer.plots=false",
                 "model.hidden_size=6", "model.embed_size=5"]  # fmt: skip
    run_train(compose_config(overrides, root / "run"))
    return root / "run"
