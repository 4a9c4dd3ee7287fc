"""The thread rule (``foldexp/cpus.py``) and a run's count (``foldexp/train/threads.py``): the
CPUs the process may use, its share beside other ranks, sweep jobs and workers, the step's size,
a resume's own count; never the load."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from foldexp import cpus
from foldexp.blocks import Embedding
from foldexp.config import DeviceConfig, TrainerConfig
from foldexp.config.errors import ConfigError
from foldexp.config.settings import DeviceSettings, TrainerSettings, settings_of
from foldexp.cpus import WORK_PER_THREAD, cgroup_cpus, cpu_share, threads_for
from foldexp.train import threads as run_threads_mod
from foldexp.train.artifacts import write_json
from foldexp.train.distributed import DistContext
from foldexp.train.threads import dense_weights, run_threads, step_work, sweep_jobs


def _cgroup(tmp_path: Path, proc_line: str, files: dict[str, str]) -> float | None:
    root = tmp_path / "cgroup"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    proc = tmp_path / "proc_self_cgroup"
    proc.write_text(proc_line + "\n")
    return cgroup_cpus(root, proc)


def test_cgroup_v2_quota_is_the_lowest_along_the_path(tmp_path: Path) -> None:
    files = {"cpu.max": "max 100000", "a/cpu.max": "300000 100000", "a/b/cpu.max": "max 100000"}
    assert _cgroup(tmp_path, "0::/a/b", files) == 3.0
    assert _cgroup(tmp_path / "x", "0::/a", {"a/cpu.max": "150000 100000"}) == 1.5
    assert _cgroup(tmp_path / "y", "0::/", {"cpu.max": "max 100000"}) is None


def test_cgroup_v1_quota_and_none(tmp_path: Path) -> None:
    v1 = {"cpu,cpuacct/cpu.cfs_quota_us": "200000", "cpu,cpuacct/cpu.cfs_period_us": "100000"}
    assert _cgroup(tmp_path, "4:cpu,cpuacct:/docker/abc", v1) == 2.0  # the container's root
    unlimited = {"cpu,cpuacct/cpu.cfs_quota_us": "-1", "cpu,cpuacct/cpu.cfs_period_us": "100000"}
    assert _cgroup(tmp_path / "u", "4:cpu,cpuacct:/", unlimited) is None
    assert cgroup_cpus(tmp_path / "none", tmp_path / "no_such_file") is None


def test_cgroup_v1_quota_of_a_parent_counts(tmp_path: Path) -> None:
    """A quota set on a job's cgroup binds the step inside it, in v1 as in v2."""
    v1 = {
        "cpu,cpuacct/job/cpu.cfs_quota_us": "200000",
        "cpu,cpuacct/job/cpu.cfs_period_us": "100000",
        "cpu,cpuacct/job/step/cpu.cfs_quota_us": "-1",
        "cpu,cpuacct/job/step/cpu.cfs_period_us": "100000",
    }
    assert _cgroup(tmp_path, "4:cpu,cpuacct:/job/step", v1) == 2.0


def test_available_cpus_takes_the_affinity_capped_by_the_quota(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    monkeypatch.setattr(cpus, "cgroup_cpus", lambda: None)
    assert cpus.available_cpus() == 16
    monkeypatch.setattr(cpus, "cgroup_cpus", lambda: 4.5)
    assert cpus.available_cpus() == 4  # 4.5 CPUs of time: a fifth thread would queue
    monkeypatch.setattr(cpus, "cgroup_cpus", lambda: 0.5)
    assert cpus.available_cpus() == 1


def test_the_share_divides_among_processes_and_leaves_the_workers_theirs() -> None:
    assert cpu_share(16) == 16
    assert cpu_share(16, processes=4) == 4
    assert cpu_share(16, processes=4, workers=1) == 3
    assert cpu_share(2, processes=3, workers=2) == 1


def test_one_thread_per_unit_of_work_up_to_the_share() -> None:
    # The measured cases (16-core Intel): SST's Tree-LSTM ≈ 2.4e8 multiply-adds per step was
    # fastest at 2 threads of 16; the peers' step ≈ 7e9 at 16.
    assert threads_for(16, 2.44e8) == 2
    assert threads_for(16, 6.95e9) == 16
    assert threads_for(2, 2.3e7) == 1  # the default experiment
    assert threads_for(3, None) == 3
    assert threads_for(1, 1e12) == 1
    assert threads_for(8, 5 * WORK_PER_THREAD) == 5


def test_the_rule_never_reads_the_load() -> None:
    code = (
        "import os; os.getloadavg = lambda: ({}, 0.0, 0.0); "
        "from foldexp.cpus import available_cpus, cpu_share, threads_for; "
        "print(threads_for(cpu_share(available_cpus()), 1e12))"
    )
    quiet, busy = (
        subprocess.run([sys.executable, "-c", code.format(load)], capture_output=True, text=True)
        for load in (0.0, 1e6)
    )
    assert quiet.returncode == busy.returncode == 0, quiet.stderr + busy.stderr
    assert quiet.stdout == busy.stdout == f"{cpus.available_cpus()}\n"


class _Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.table = torch.nn.Embedding(1000, 8)
        self.words = Embedding(500, 8)
        self.cell = torch.nn.Linear(8, 20)  # 160 weights, and a bias that does not count

    def example_size(self, x: int) -> int:
        return x


def test_dense_weights_leave_out_tables_and_biases() -> None:
    assert dense_weights(_Model()) == 160
    assert step_work(_Model(), [3, 5], batch_size=10) == 160 * 10 * 4


def _cfg(
    threads: int | None = None, resume: bool = False, workers: int = 0
) -> tuple[DeviceSettings, TrainerSettings]:
    device = settings_of(DeviceConfig, {"threads": threads})
    trainer = settings_of(
        TrainerConfig, {"resume": resume, "num_workers": workers, "batch_size": 10}
    )
    return device, trainer


def test_a_run_takes_the_rule_or_the_count_it_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_threads_mod, "available_cpus", lambda: 8)
    monkeypatch.setattr(run_threads_mod, "step_work", lambda m, x, b: 1e12)
    assert run_threads(*_cfg(), DistContext(), _Model(), [], tmp_path) == 8
    assert run_threads(*_cfg(workers=2), DistContext(), _Model(), [], tmp_path) == 6
    assert run_threads(*_cfg(threads=3), DistContext(), _Model(), [], tmp_path) == 3
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")  # two DDP ranks on this machine
    assert run_threads(*_cfg(), DistContext(), _Model(), [], tmp_path) == 4


def test_a_resume_keeps_the_runs_count_or_refuses_another(tmp_path: Path) -> None:
    write_json(tmp_path / "run_info.json", {"config": {}, "info": {}, "threads": 3})
    assert run_threads(*_cfg(resume=True), DistContext(), _Model(), [], tmp_path) == 3
    assert run_threads(*_cfg(threads=3, resume=True), DistContext(), _Model(), [], tmp_path) == 3
    with pytest.raises(ConfigError) as err:
        run_threads(*_cfg(threads=2, resume=True), DistContext(), _Model(), [], tmp_path)
    assert "trained on 3 thread(s)" in str(err.value) and "device.threads=3" in str(err.value)
    write_json(tmp_path / "run_info.json", {"config": {}, "info": {}, "threads": "many"})
    with pytest.raises(ConfigError, match=r"run_info\.json: threads='many'"):
        run_threads(*_cfg(resume=True), DistContext(), _Model(), [], tmp_path)


def test_a_joblib_sweep_splits_the_cpus_between_its_jobs() -> None:
    from foldexp.train.app import compose_config

    compose_config(["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"])
    assert sweep_jobs() == 2
    compose_config(["hydra/launcher=joblib", "hydra.launcher.n_jobs=-1"])
    assert sweep_jobs() == cpus.available_cpus()
    compose_config([])
    assert sweep_jobs() == 1
