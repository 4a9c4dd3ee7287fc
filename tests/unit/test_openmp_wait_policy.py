"""``import foldexp`` makes torch's OpenMP threads sleep at barriers unless the user chose."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

CODE = "import foldexp, os; print(os.environ.get('OMP_WAIT_POLICY'))"


def _policy(env_value: str | None, code: str = CODE) -> str:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if env_value is not None:
        env["OMP_WAIT_POLICY"] = env_value
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.mark.parametrize(("given", "expected"), [(None, "PASSIVE"), ("ACTIVE", "ACTIVE")])
def test_passive_unless_the_user_chose(given: str | None, expected: str) -> None:
    assert _policy(given) == expected


def test_left_alone_when_torch_came_first() -> None:
    # OpenMP has read its settings by then; changing the variable would only mislead.
    assert _policy(None, "import torch; " + CODE) == "None"
