"""``import foldexp`` shortens torch's OpenMP spin-wait, or on a busy machine makes it sleep
(``foldexp/startup.py``); how many threads run never depends on it
(``tests/unit/train/test_threads.py``)."""

from __future__ import annotations

import os
import subprocess
import sys

CODE = (
    "import foldexp, os; print(os.environ.get('OMP_WAIT_POLICY'), os.environ.get('GOMP_SPINCOUNT'))"
)


def _settings(extra_env: dict[str, str], code: str = CODE) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env.update(extra_env)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


# Prefixes that make the child process's machine look quiet (2 cores) or busy at start.
QUIET = "import os; os.getloadavg = lambda: (0.0, 0.0, 0.0); os.cpu_count = lambda: 2; "
BUSY = "import os; os.getloadavg = lambda: (1e6, 0.0, 0.0); "


def test_short_spin_on_a_quiet_machine_passive_on_a_busy_one() -> None:
    assert _settings({}, QUIET + CODE) == "None 10000"
    assert _settings({}, BUSY + CODE) == "PASSIVE None"


def test_the_users_own_setting_wins() -> None:
    assert _settings({"OMP_WAIT_POLICY": "ACTIVE"}) == "ACTIVE None"
    assert _settings({"GOMP_SPINCOUNT": "5"}) == "None 5"


def test_left_alone_when_torch_came_first() -> None:
    # OpenMP has read its settings by then; changing the variables would only mislead.
    assert _settings({}, "import torch; " + CODE) == "None None"
