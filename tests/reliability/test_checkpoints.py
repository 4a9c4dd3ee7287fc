"""Checkpoints that cannot lie: checksums, readable refusals, and resumes under the same config.

Each checkpoint and result file carries a ``.sha256`` sidecar; a changed, empty or truncated
``last.pt`` is refused naming the file, what is wrong and what to do, never with torch's advice to
load with ``weights_only=False``. A resume whose config changes what the run trains (seed,
optimizer, model shape) is refused naming the keys with their old and new values, before anything
in the folder is touched.
"""

from __future__ import annotations

import json
import logging
import os
import traceback
from pathlib import Path

import pytest
import torch

from foldexp.config.errors import ConfigError
from foldexp.train.app import compose_config
from foldexp.train.artifacts import (
    CorruptFileError,
    atomic_write,
    checksum_path,
    file_sha256,
    read_verified_json,
    verify_file,
    write_json,
)
from foldexp.train.checkpoint import read_checkpoint
from foldexp.train.loop import run_train
from foldexp.train.resume_config import ResumeConfigError, config_changes


@pytest.fixture
def resume(tiny: list[str]) -> list[str]:
    """Overrides resuming a ``tiny`` run for a second epoch."""
    return [*tiny, "trainer.resume=true", "trainer.epochs=2"]


def _flip_middle(path: Path, n: int = 64) -> None:
    """Flips the low bit of ``n`` bytes in the middle of the largest weight's stored bytes:
    plausible values, which torch loads without a murmur."""
    weights = torch.load(path, weights_only=True)["model"].values()
    raw = max((w.numpy().tobytes() for w in weights), key=len)
    data = bytearray(path.read_bytes())
    start = data.find(raw)  # torch stores tensors uncompressed
    assert start >= 0 and len(raw) >= n
    middle = start + (len(raw) - n) // 2
    data[middle : middle + n] = bytes(b ^ 0x01 for b in data[middle : middle + n])
    path.write_bytes(bytes(data))


def _assert_refused_well(message: str, path: Path) -> None:
    assert str(path) in message
    assert "weights_only" not in message
    assert "trainer.overwrite=true" in message and "best.pt" in message  # what to do


def test_flipped_bytes_in_last_pt_are_refused(resume: list[str], run: Path) -> None:
    last = run / "checkpoints" / "last.pt"
    _flip_middle(last)
    torch.load(last, weights_only=True)  # torch itself reads it without a murmur
    with pytest.raises(CorruptFileError, match="does not match its checksum") as err:
        run_train(compose_config(resume, run))
    _assert_refused_well(str(err.value), last)


@pytest.mark.parametrize("sidecar", [True, False], ids=["checksummed", "legacy"])
@pytest.mark.parametrize("keep", [0, 0.5], ids=["empty", "truncated"])
def test_empty_or_truncated_last_pt_names_the_file(
    resume: list[str], run: Path, sidecar: bool, keep: float
) -> None:
    last = run / "checkpoints" / "last.pt"
    data = last.read_bytes()
    last.write_bytes(data[: int(len(data) * keep)])
    if not sidecar:  # a run from before checksums, accepted knowingly: still not loaded
        checksum_path(last).unlink()
        resume = [*resume, "trainer.trust_unverified=true"]
    with pytest.raises(CorruptFileError) as err:
        run_train(compose_config(resume, run))
    message = str(err.value)
    _assert_refused_well(message, last)
    assert ("empty (0 bytes)" if keep == 0 else "bytes") in message
    shown = "".join(traceback.format_exception(err.value))
    assert "EOFError" not in shown and "During handling" not in shown  # no bare torch error


class Smuggled:
    """Stands for any class a crafted checkpoint might name."""


def test_refused_pickle_is_explained_without_weights_only_advice(
    resume: list[str], run: Path
) -> None:
    last = run / "checkpoints" / "last.pt"
    payload = torch.load(last, weights_only=True)
    payload["model"] = Smuggled()
    atomic_write(last, lambda tmp: torch.save(payload, tmp), checksum=True)  # checksum "valid"
    with pytest.raises(CorruptFileError) as err:
        run_train(compose_config(resume, run))
    message = str(err.value)
    assert "Smuggled" in message and "never unpickles" in message
    _assert_refused_well(message, last)


@pytest.mark.parametrize(
    "override, key, old, new",
    [
        ("seed=5", "seed", "0", "5"),
        ("optimizer.lr=0.5", "optimizer.lr", "0.01", "0.5"),
        ("model.hidden_size=16", "model.hidden_size", "8", "16"),
    ],
)
def test_resume_with_another_config_is_refused(
    resume: list[str], run: Path, override: str, key: str, old: str, new: str
) -> None:
    before = {p.name: file_sha256(p) for p in run.rglob("*") if p.is_file() and p.suffix != ".lock"}
    with pytest.raises(ResumeConfigError) as err:
        run_train(compose_config([*resume, override], run))
    message = str(err.value)
    assert f"{key}: {old} in the run, {new} now" in message and str(run) in message
    after = {p.name: file_sha256(p) for p in run.rglob("*") if p.is_file() and p.suffix != ".lock"}
    assert after == before  # refused before run_info.json or anything else was rewritten


def test_resume_may_change_length_display_and_name_the_runs_threads(
    resume: list[str], run: Path
) -> None:
    assert json.loads((run / "run_info.json").read_text())["threads"] == 1  # a tiny model's
    extra = ["trainer.max_steps=1000", "trainer.plots=true", "device.threads=1", "task_name=x"]
    results = run_train(compose_config([*resume, *extra], run))
    assert results["epochs_run"] == 2 and results["seed"] == 0 and results["threads"] == 1


def test_resume_on_another_thread_count_is_refused(resume: list[str], run: Path) -> None:
    # Sums over 2 threads come out in another order: the run would not equal an uninterrupted one.
    before = {p.name: file_sha256(p) for p in run.rglob("*") if p.is_file() and p.suffix != ".lock"}
    with pytest.raises(ConfigError, match=r"trained on 1 thread\(s\) and device\.threads=2"):
        run_train(compose_config([*resume, "device.threads=2"], run))
    after = {p.name: file_sha256(p) for p in run.rglob("*") if p.is_file() and p.suffix != ".lock"}
    assert after == before


def test_moved_data_folder_is_not_a_change() -> None:
    saved = {"paths": {"data_dir": "/old/data"}, "dataset": {"data_dir": "/old/data", "n": 1}}
    now = {"paths": {"data_dir": "/new/data"}, "dataset": {"data_dir": "/new/data", "n": 2}}
    assert config_changes(saved, now) == [("dataset.n", 1, 2)]


def test_legacy_checkpoint_without_checksum_or_config_resumes_when_trusted(
    resume: list[str], run: Path, caplog: pytest.LogCaptureFixture
) -> None:
    last = run / "checkpoints" / "last.pt"
    payload = torch.load(last, weights_only=True)
    del payload["config"]
    torch.save(payload, last)
    for sidecar in run.rglob("*.sha256"):
        sidecar.unlink()
    with pytest.raises(CorruptFileError, match="trainer.trust_unverified=true"):
        run_train(compose_config(resume, run))  # refused, saying how to accept it
    trusted = [*resume, "trainer.trust_unverified=true"]
    with caplog.at_level(logging.WARNING, logger="foldexp.train"):
        results = run_train(compose_config(trusted, run))
    assert results["epochs_run"] == 2
    assert "no last.pt.sha256 sidecar" in caplog.text and "read unverified" in caplog.text
    assert "stores no config" in caplog.text


def test_a_kill_between_checksum_and_rename_leaves_a_verifiable_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "results.json"
    write_json(path, {"v": 1})
    real = os.replace

    def replace(src: str, dst: str) -> None:
        if Path(dst) == path:  # the sidecar is already renamed; the file is not
            raise KeyboardInterrupt
        real(src, dst)

    monkeypatch.setattr("foldexp.train.artifacts.os.replace", replace)
    with pytest.raises(KeyboardInterrupt):
        write_json(path, {"v": 2})
    monkeypatch.undo()
    assert read_verified_json(path) == {"v": 1}  # the old version, still intact, still accepted
    write_json(path, {"v": 3})
    assert read_verified_json(path) == {"v": 3}
    path.write_text('{"v": 4}\n')
    with pytest.raises(CorruptFileError, match=r"results\.json does not match its checksum"):
        read_verified_json(path)


def test_verify_file_and_read_checkpoint_for_other_readers(finished: Path) -> None:
    assert verify_file(finished / "results.json")
    assert read_verified_json(finished / "results.json")["seed"] == 0
    payload = read_checkpoint(finished / "checkpoints" / "best.pt", need=("model", "config"))
    assert payload["config"]["model"]["hidden_size"] == 8
    line = checksum_path(finished / "results.json").read_text().splitlines()[0]
    assert line == f"{file_sha256(finished / 'results.json')}  results.json"  # sha256sum -c


@pytest.mark.parametrize(
    "content",
    [
        b"hello world\n" * 10,  # text: the unpickler fails with a KeyError or an IndexError
        b"[1, 2, 3]\n",
        bytes(range(256)) * 12,  # noise: "Unsupported operand", not a refused object
        b"\x80\x02}q\x00(X\x05\x00\x00\x00modelq\x01",  # a pickle cut short
    ],
    ids=["text", "list_text", "noise", "cut_pickle"],
)
def test_bytes_that_are_no_checkpoint_are_reported_as_damaged(run: Path, content: bytes) -> None:
    best = run / "checkpoints" / "best.pt"
    atomic_write(best, lambda tmp: Path(tmp).write_bytes(content), checksum=True)
    with pytest.raises(CorruptFileError) as err:
        read_checkpoint(best)
    message = str(err.value)
    assert str(best) in message and "damaged" in message
    assert "Python object" not in message and "weights_only" not in message


def test_a_refused_object_in_best_pt_keeps_its_own_message(run: Path) -> None:
    best = run / "checkpoints" / "best.pt"
    payload = torch.load(best, weights_only=True)
    payload["model"] = Smuggled()
    atomic_write(best, lambda tmp: torch.save(payload, tmp), checksum=True)
    with pytest.raises(CorruptFileError, match=r"holds the Python object .*Smuggled"):
        read_checkpoint(best)
