"""``foldexp train --help`` shows foldexp's own header and each group's options, without the
schemas (``*_schema``) that Hydra's help listed as options, and without Hydra's header."""

from __future__ import annotations

import pytest

from foldexp.cli import main
from foldexp.train.app import compose_config


def test_train_help_is_foldexps_own(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("foldexp train: trains a model") and "powered by Hydra" not in out
    assert "_schema" not in out and "--resume RUN_DIR" in out
    lines = [ln.strip() for ln in out.splitlines() if ln.startswith("  ") and ln[2] != " "]
    groups = dict(line.split(": ", 1) for line in lines)
    assert groups["optimizer"] == "adagrad, adam, adamw, sgd"  # was: adagrad_schema, ...
    for option in groups["optimizer"].split(", "):  # each option is one that composes
        assert compose_config([f"optimizer={option}"]).optimizer._target_
