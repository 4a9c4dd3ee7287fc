"""Ctrl-C during ``foldexp train``: one line saying where the run is and how to go on, exit 130.

The interrupt is caught only at the command's outermost level, after the run folder's lock and
any half-written checkpoint have been cleaned up on the way out, so the folder resumes as the
message says.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from foldexp.cli import main
from foldexp.train.app import INTERRUPTED


def test_an_interrupt_exits_130_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(cfg: object) -> dict:
        raise KeyboardInterrupt

    monkeypatch.setattr("foldexp.train.loop.run_train", interrupted)
    monkeypatch.delenv("FOLDEXP_TRACEBACK", raising=False)
    with pytest.raises(SystemExit) as exit_:
        main(["train", "trainer.progress=false", f"hydra.run.dir={tmp_path}"])
    assert exit_.value.code == INTERRUPTED == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "interrupted" in err[0] and "Traceback" not in err[0]
    assert f"trainer.resume=true hydra.run.dir={tmp_path}" in err[0]


def _train(overrides: list[str], out: Path) -> list[str]:
    return [sys.executable, "-m", "foldexp.cli", "train", *overrides, f"hydra.run.dir={out}"]


def test_a_real_sigint_leaves_a_run_that_resumes(tiny: list[str], tmp_path: Path) -> None:
    out = tmp_path / "run"
    base = [o for o in tiny if not o.startswith("trainer.epochs")]
    env = {k: v for k, v in os.environ.items() if k != "FOLDEXP_TRACEBACK"}
    with subprocess.Popen(
        _train([*base, "trainer.epochs=100000"], out),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        # a child of a non-interactive shell may inherit SIGINT ignored: Ctrl-C's default back
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    ) as proc:
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                if "epoch 1:" in line:  # epoch 0 is checkpointed
                    proc.send_signal(signal.SIGINT)
                    break
            rest = proc.stdout.read()
            assert proc.wait(timeout=120) == 130, rest
        finally:
            proc.kill()
    assert "Traceback" not in rest and "KeyboardInterrupt" not in rest
    assert f"interrupted; the run folder is {out}" in rest and "trainer.resume=true" in rest
    left = sorted(p.name for p in (out / "checkpoints").iterdir() if "last" in p.name)
    assert left == ["last.pt", "last.pt.sha256"]  # no half-written temporary left behind
    again = subprocess.run(
        _train([*base, "trainer.epochs=3", "trainer.resume=true"], out),
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert again.returncode == 0, again.stdout + again.stderr
    assert "resumed from" in again.stdout + again.stderr
