"""A sidecar is itself an untrusted file: a FIFO or a link to ``/dev/zero`` put at its name
costs one line and exit status 2, never a hang or the machine's memory.

Before ``artifacts._read_small`` the sidecar was read whole by name: ``foldexp predict`` waited
on a FIFO for ever, and read ``/dev/zero`` until memory ran out. Each command runs in a child
process under a timeout and a memory cap, so the old behaviour fails the test, not the run.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _dev_zero(path: Path) -> None:
    path.symlink_to("/dev/zero")


def _cap_memory(cap: int) -> Callable[[], None]:
    return lambda: resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX FIFOs")
@pytest.mark.parametrize(
    ("target", "command"),
    [("checkpoints/best.pt", "predict"), ("run_info.json", "predict"), ("results.json", "report")],
)
@pytest.mark.parametrize("plant", [_fifo, _dev_zero], ids=["fifo", "dev-zero"])
def test_a_sidecar_that_is_no_plain_file_is_refused_at_once(
    run: Path,
    tmp_path: Path,
    target: str,
    command: str,
    plant: Callable[[Path], None],
    capped_child: Callable[[int], tuple[dict[str, str], int]],
) -> None:
    sidecar = run / f"{target}.sha256"
    sidecar.unlink()
    plant(sidecar)
    inputs = tmp_path / "in.txt"
    inputs.write_text("(1 (2 3) (4 5))\n")
    argv = [str(run), str(inputs)] if command == "predict" else [str(run)]
    env, cap = capped_child(2 << 30)  # reading /dev/zero whole would pass any cap
    proc = subprocess.run(
        [sys.executable, "-m", "foldexp.cli", command, *argv],
        capture_output=True, text=True, env=env, timeout=60, preexec_fn=_cap_memory(cap),
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and sidecar.name in err[0] and "--trust-unverified" in err[0], err
    assert "out of memory" not in err[0]


def test_an_oversized_sidecar_is_not_a_checksum_file(run: Path) -> None:
    from foldexp.train.artifacts import CorruptFileError, verify_file

    sidecar = run / "results.json.sha256"
    sidecar.write_text(sidecar.read_text() + "#" * 10_000)
    with pytest.raises(CorruptFileError, match="larger than 4096 bytes"):
        verify_file(run / "results.json")


def test_a_checkpoint_swapped_after_its_check_is_not_what_loads(
    run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file verified is the file loaded: before, ``read_checkpoint`` hashed ``best.pt``,
    then opened it again by name, so one renamed onto it in between loaded unchecked."""
    import torch

    from foldexp.train import checkpoint

    best = run / "checkpoints" / "best.pt"
    original = torch.load(best, weights_only=True)["model"]
    other = run / "other.pt"
    torch.save({"model": {k: v + 1 for k, v in original.items()}}, other)
    real = checkpoint.verify_file

    def verify_then_swap(*args: object, **kwargs: object) -> bool:
        verified = real(*args, **kwargs)
        os.replace(other, best)  # the swap, after the check
        return verified

    monkeypatch.setattr(checkpoint, "verify_file", verify_then_swap)
    loaded = checkpoint.read_checkpoint(best, need=("model",))["model"]
    assert all(torch.equal(loaded[k], original[k]) for k in original)


def test_a_json_file_swapped_after_its_check_is_not_what_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The JSON checked is the JSON parsed: before, ``read_verified_json`` hashed the file by
    name, then read it again by name, so one renamed onto it between the two was read
    unchecked."""
    from foldexp.train import artifacts

    path = artifacts.write_json(tmp_path / "results.json", {"test_accuracy": 0.5})
    forged = tmp_path / "forged.json"
    forged.write_text('{"test_accuracy": 1.0}\n')
    real = artifacts._sha256

    def hash_then_swap(f: object) -> str:
        digest = real(f)  # type: ignore[arg-type]
        if forged.exists():
            os.replace(forged, path)  # the swap, right after the contents were hashed
        return digest

    monkeypatch.setattr(artifacts, "_sha256", hash_then_swap)
    assert artifacts.read_verified_json(path) == {"test_accuracy": 0.5}
    assert not forged.exists()  # the swap happened
