"""``import foldexp`` shortens torch's OpenMP spin-wait, or on a busy machine makes it sleep and
runs one intra-op thread (``foldexp/startup.py``)."""

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


THREADS = (
    "from foldexp.startup import default_threads; print(default_threads(), default_threads(3))"
)


def test_one_thread_on_a_machine_busy_at_start_unless_asked() -> None:
    assert _settings({}, QUIET + THREADS) == "2 3"
    assert _settings({}, BUSY + THREADS) == "1 3"


def test_the_thread_choice_reaches_a_run() -> None:
    import torch
    from omegaconf import OmegaConf

    from foldexp.startup import default_threads
    from foldexp.train.distributed import DistContext
    from foldexp.train.loop import _configure_process

    old = torch.get_num_threads()
    cpu = torch.device("cpu")
    try:
        cfg = OmegaConf.create(
            {
                "onednn": None,
                "fused_cells": None,
                "flush_denormal": True,
                "keep_memory": False,
                "threads": None,
            }
        )
        governor = _configure_process(cfg, DistContext(), cpu)
        assert torch.get_num_threads() == default_threads()
        if os.path.exists("/proc/loadavg") and (os.cpu_count() or 1) > 1:
            assert governor is not None and governor.current == default_threads()
        cfg.threads = 1  # a count of the user's own: kept whatever the load
        assert _configure_process(cfg, DistContext(), cpu) is None
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(old)
