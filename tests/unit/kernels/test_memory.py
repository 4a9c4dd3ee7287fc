"""``keep_freed_memory``: a freed big tensor's pages are reused, not faulted in again."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only"
)

# Allocates and touches a 64 MB tensor eight times; prints the page faults of the last four (the
# heap settles within the first few).
PROBE = """
import resource, sys, torch
from foldexp.kernels import keep_freed_memory
if sys.argv[1] == "keep":
    assert keep_freed_memory() and keep_freed_memory()  # idempotent
for _ in range(4):
    t = torch.ones(16 * 2**20); del t
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(4):
    t = torch.ones(16 * 2**20); del t
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True
    )
    return int(out.stdout.split()[-1])


def test_freed_pages_are_reused_only_when_asked() -> None:
    pages = 16 * 2**20 * 4 // 4096  # 16,384 pages of 4 KB per tensor
    assert _faults("default") > 3 * pages  # each new tensor faulted in afresh
    assert _faults("keep") < pages  # four tensors, fewer faults than one tensor has pages
