"""Shared by the fault-injection tests: a run small enough to train in seconds, and one
finished run that tests copy before they damage it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from foldexp.train.app import compose_config
from foldexp.train.loop import run_train


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
