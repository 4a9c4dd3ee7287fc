"""``make gpu-check`` (``foldexp.bench.gpu_check``): without CUDA it says so in one line and
exits 2; its table, tried on the CPU, names each preset's outcome and the peers' rates."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from foldexp.bench.gpu_check import main

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
def test_without_cuda_one_line_and_exit_2() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "foldexp.bench.gpu_check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "no CUDA device present" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_summary_table_on_the_cpu(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("FOLDEXP_DATA", str(tmp_path))  # no data: SST is reported, not failed
    args = ["--device", "cpu", "--skip-tests", "--batches", "2", "--repeats", "1"]
    code = main([*args, "--trees", "4", "--presets", "calc_treelstm,sst_treelstm,text_csv"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "| train calc_treelstm, 1 epoch of <= 2 batches | ok, " in out
    assert "| train sst_treelstm, 1 epoch of <= 2 batches | no data here, - |" in out
    assert "| train text_csv, 1 epoch of <= 2 batches | no data here, - |" in out
    assert "peers' training step, engine (4 trees" in out and "trees/s" in out
