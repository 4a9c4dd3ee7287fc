"""Crafted run-folder files cost one line and exit status 2, never a crash or a wrong answer.

Each test damages a copy of the tiny finished run as an attacker would, sidecar included where
the attack needs one (a crafter can compute a sha256 too): a checkpoint or result file without
its ``.sha256`` sidecar is refused by every reader unless the user accepts it knowingly
(``--trust-unverified``, ``trainer.trust_unverified=true``); a checkpoint's position, tensors,
optimizer state and RNG states, and ``run_info.json``'s counts, are checked before anything is
built or allocated from them (``foldexp/train/checkpoint_checks.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from foldexp.cli import main
from foldexp.train import runs
from foldexp.train.artifacts import checksum_path, file_sha256, write_json


def _reseal(path: Path) -> None:
    """A sidecar matching ``path`` as it now is: what a crafter writes."""
    checksum_path(path).write_text(f"{file_sha256(path)}  {path.name}\n", encoding="ascii")


def _craft(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """``path``'s checkpoint changed by ``change`` and resealed."""
    payload = torch.load(path, weights_only=True)
    change(payload)
    torch.save(payload, path)
    _reseal(path)


def _one_line_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """Runs ``foldexp argv``; asserts it exits with status 2 and one stderr line, returned."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


@pytest.fixture(autouse=True)
def _no_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FOLDEXP_TRACEBACK", raising=False)  # the user's one line, not a trace


@pytest.fixture
def inputs(tmp_path: Path) -> Path:
    path = tmp_path / "in.txt"
    path.write_text("(1 (2 3) (4 5))\n(7 (8 9))\n")
    return path


def _resume(tiny: list[str], run: Path, *more: str) -> list[str]:
    base = [o for o in tiny if not o.startswith("trainer.epochs")]
    return [
        "train",
        *base,
        "trainer.epochs=2",
        "trainer.resume=true",
        f"hydra.run.dir={run}",
        *more,
    ]


# ---------------------------------------------------------------------- rows 4 and 5: sidecars


def _nan_weights(payload: dict[str, Any]) -> None:
    for tensor in payload["model"].values():
        if tensor.is_floating_point():
            tensor.fill_(float("nan"))


@pytest.mark.parametrize("command", ["predict", "eval", "ensemble"])
def test_best_pt_without_sidecar_is_refused_by_every_reader(
    run: Path, inputs: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    best = run / "checkpoints" / "best.pt"
    _craft(best, _nan_weights)
    checksum_path(best).unlink()
    argv = {
        "predict": ["predict", str(run), str(inputs)],
        "eval": ["eval", str(run), "--out", str(run / "e.json")],
        "ensemble": ["ensemble", str(run), "--out", str(run / "ens")],
    }[command]
    line = _one_line_exit_2(capsys, argv)
    assert str(best) in line and "no best.pt.sha256 sidecar" in line
    assert "--trust-unverified" in line


def test_trust_unverified_reads_a_file_without_sidecar_knowingly(run: Path) -> None:
    for sidecar in run.rglob("*.sha256"):  # a run from before foldexp stored checksums
        sidecar.unlink()
    out = run / "e.json"
    assert main(["eval", str(run), "--out", str(out), "--trust-unverified"]) == 0
    assert 0 <= json.loads(out.read_text())["test_accuracy"] <= 1


def test_teacher_without_sidecar_is_refused(
    tiny: list[str], run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checksum_path(run / "checkpoints" / "best.pt").unlink()
    argv = ["train", *tiny, f"model.teacher=[{run}]", f"hydra.run.dir={tmp_path / 'student'}"]
    line = _one_line_exit_2(capsys, argv)
    assert "best.pt" in line and "trainer.trust_unverified=true" in line


def test_edited_results_json_is_refused_by_report(
    run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = run / "results.json"
    data = json.loads(results.read_text())
    data["test_accuracy"] = 0.99
    results.write_text(json.dumps(data))
    line = _one_line_exit_2(capsys, ["report", str(run)])
    assert str(results) in line and "does not match its checksum" in line
    checksum_path(results).unlink()  # the sidecar deleted as well
    line = _one_line_exit_2(capsys, ["report", str(run)])
    assert "no results.json.sha256 sidecar" in line and "--trust-unverified" in line
    assert main(["report", str(run), "--trust-unverified"]) == 0
    assert "0.99" in (run / "report.csv").read_text()  # accepted knowingly, reported


def test_run_info_json_without_sidecar_is_refused(
    run: Path, inputs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checksum_path(run / "run_info.json").unlink()
    line = _one_line_exit_2(capsys, ["predict", str(run), str(inputs)])
    assert "run_info.json has no run_info.json.sha256 sidecar" in line


# ---------------------------------------------------------------------- row 6: the position


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"epoch": -5}, "epoch"),
        ({"epoch": 7}, "epoch"),  # the history has 1 row
        ({"batch": 10**18}, "batch"),
        ({"batch": 4, "step": 4}, "batch"),  # the tiny run's epoch has 3 batches
        ({"step": 100}, "step"),  # more than 1 epoch of 3 batches
        ({"step": -1}, "step"),
        ({"best": "x"}, "best"),
        ({"best_epoch": 5}, "best_epoch"),
    ],
)
def test_a_crafted_position_is_refused_on_resume(
    tiny: list[str], run: Path, capsys: pytest.CaptureFixture[str], change: dict, field: str
) -> None:
    last = run / "checkpoints" / "last.pt"
    _craft(last, lambda p: p["progress"].update(change))
    line = _one_line_exit_2(capsys, _resume(tiny, run))
    assert str(last) in line and f"progress.{field} " in line


def test_a_formula_in_the_history_never_reaches_metrics_csv(
    tiny: list[str], run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    last = run / "checkpoints" / "last.pt"
    _craft(last, lambda p: p["progress"]["history"][0].update(train_loss="=cmd|' /C calc'!A0"))
    (run / "metrics.csv").unlink()  # the resume would rewrite it from the history
    line = _one_line_exit_2(capsys, _resume(tiny, run))
    assert "progress.history[0]['train_loss']" in line and "not a number" in line
    assert not (run / "metrics.csv").exists()


def test_a_formula_as_a_history_column_never_reaches_metrics_csv(
    tiny: list[str], run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The column's name, not its value: it became ``metrics.csv``'s header cell."""
    last = run / "checkpoints" / "last.pt"
    _craft(last, lambda p: p["progress"]["history"][0].update({"=cmd|' /C calc'!A0": 1.0}))
    (run / "metrics.csv").unlink()  # the resume would rewrite it from the history
    line = _one_line_exit_2(capsys, _resume(tiny, run))
    assert "progress.history[0]" in line and "has a column" in line
    assert not (run / "metrics.csv").exists()


def test_a_stop_reason_that_would_forge_log_lines_is_refused(
    tiny: list[str], run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``stopped`` is logged as it is (``stopped early: ...``): a newline in it wrote a line
    of the attacker's into ``app.log``."""
    last = run / "checkpoints" / "last.pt"
    forged = "x\n[2026-01-01 00:00:00][foldexp.train][INFO] - test: test_accuracy=1.0000"
    _craft(last, lambda p: p["progress"].update(stopped=forged))
    line = _one_line_exit_2(capsys, _resume(tiny, run))
    assert "progress.stopped" in line and str(last) in line
    log = run / "app.log"  # opened at its first record: a refusal that logs nothing makes none
    assert not log.exists() or "test_accuracy=1.0000" not in log.read_text()


# ---------------------------------------------------------------------- rows 7 and 9: tensors


def _expanded(shape: torch.Size) -> torch.Tensor:
    return torch.zeros(1).expand(*shape) if len(shape) else torch.zeros(())


def _stride_0_checkpoint(run: Path) -> Path:
    """``run``'s model made huge (``hidden_size`` 65536, ~17 GB a tensor) and its ``best.pt``
    crafted to hold that model's weights as stride-0 views of one number: a few bytes each."""
    info_path = run / "run_info.json"
    saved = json.loads(info_path.read_text())
    saved["config"]["model"]["hidden_size"] = 65536
    write_json(info_path, saved)
    meta = runs.meta_model(saved["config"]["model"], runs.decode_info(saved["info"]))
    assert meta is not None
    best = run / "checkpoints" / "best.pt"
    _craft(
        best,
        lambda p: p.update(model={k: _expanded(v.shape) for k, v in meta.state_dict().items()}),
    )
    return best


def test_stride_0_weights_for_a_huge_model_are_refused_before_it_is_built(
    run: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    best = _stride_0_checkpoint(run)
    assert best.stat().st_size < 1_000_000  # a few bytes per tensor claiming ~17 GB each

    def never(*_: Any, **__: Any) -> None:
        raise AssertionError("the model was built from a crafted checkpoint")

    monkeypatch.setattr(runs, "build_model", never)
    line = _one_line_exit_2(capsys, ["eval", str(run), "--out", str(run / "e.json")])
    assert str(best) in line and "stride 0" in line


def test_stride_0_weights_cost_no_memory_under_a_cap(run: Path, capped_child) -> None:
    """The same attack in a process whose address space is capped at 4 GB past what a bare
    command maps: refused in one line, status 2, where the model it claims would need 172 GB."""
    _stride_0_checkpoint(run)  # the child process evaluates the run with it
    env, cap = capped_child(4 << 30)
    capped = (
        f"import resource, sys; resource.setrlimit(resource.RLIMIT_AS, ({cap}, {cap})); "
        "from foldexp.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", capped, "eval", str(run), "--out", str(run / "e.json")],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "stride 0" in err[0] and "out of memory" not in err[0]


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda t: torch.empty(t.shape, device="meta"), "is a meta tensor"),
        (lambda t: torch.quantize_per_tensor(t, 0.1, 0, torch.qint8), "is torch.qint8"),
        (lambda t: t.to(torch.complex64), "is torch.complex64"),
    ],
    ids=["meta", "quantized", "complex"],
)
# (the crafting's warning; and the loading's, which the CLI shows, not raises)
@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor:UserWarning")
@pytest.mark.filterwarnings("ignore:TypedStorage is deprecated:UserWarning")
def test_weights_of_a_kind_foldexp_never_saves_are_one_line(
    run: Path,
    inputs: Path,
    capsys: pytest.CaptureFixture[str],
    make: Callable[[torch.Tensor], torch.Tensor],
    says: str,
) -> None:
    """Each passed the layout check: a meta or quantized tensor then failed in
    ``load_state_dict`` with a traceback, a complex one was cast with a warning, losing half."""
    best = run / "checkpoints" / "best.pt"

    def change(payload: dict[str, Any]) -> None:
        name = next(iter(payload["model"]))
        payload["model"][name] = make(payload["model"][name])

    _craft(best, change)
    line = _one_line_exit_2(capsys, ["predict", str(run), str(inputs)])
    assert str(best) in line and says in line, line


def test_a_misshapen_best_pt_under_ddp_is_refused_naming_the_field(
    run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``load_best``'s DDP branch copied the broadcast weights in unchecked: a RuntimeError
    traceback from ``load_state_dict`` on every rank. (Two ranks faked: the broadcast is rank 0's
    own object.)"""
    from foldexp.train import checkpoint
    from foldexp.train import distributed as dd

    best = run / "checkpoints" / "best.pt"
    model = runs.load_trained(run).model
    first = next(iter(model.state_dict()))
    _craft(best, lambda p: p["model"].update({first: torch.zeros(3, 5)}))
    monkeypatch.setattr(dd, "broadcast", lambda ctx, obj, src=0: obj)
    with pytest.raises(checkpoint.CorruptFileError, match=r"model\.\S+ has shape \[3, 5\]"):
        checkpoint.load_best(dd.DistContext(rank=0, world_size=2), best, model)


def _adam_state(payload: dict[str, Any]) -> dict[str, Any]:
    state = payload["optimizer"]["state"]
    return state[min(state)]


@pytest.mark.parametrize(
    ("crafted", "says"),
    [
        (lambda: torch.zeros(1).expand(10**6, 10**6), "stride 0"),
        (lambda: torch.zeros(3, 5), "has shape [3, 5] but its parameter"),
        (lambda: torch.tensor(1.0), "has shape [] but its parameter"),  # SIGSEGV before
    ],
    ids=["stride0", "misshaped", "scalar"],
)
def test_crafted_optimizer_state_is_refused_before_torch_sees_it(
    tiny: list[str], run: Path, crafted: Callable[[], torch.Tensor], says: str
) -> None:
    """Run in a child process: on the code before these checks torch's fused Adam died of
    SIGSEGV, which would take the test run with it."""
    last = run / "checkpoints" / "last.pt"
    _craft(last, lambda p: _adam_state(p).update(exp_avg=crafted()))
    env = {k: v for k, v in os.environ.items() if k != "FOLDEXP_TRACEBACK"}
    proc = subprocess.run(
        [sys.executable, "-m", "foldexp.cli", *_resume(tiny, run)],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    line = [ln for ln in proc.stderr.splitlines() if "error:" in ln]
    assert len(line) == 1 and str(last) in line[0] and "exp_avg" in line[0] and says in line[0]


def _first_group(payload: dict[str, Any]) -> dict[str, Any]:
    return payload["optimizer"]["param_groups"][0]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda p: _adam_state(p).pop("exp_avg"), "exp_avg is missing"),
        (lambda p: _adam_state(p).update(step=torch.zeros(24, 4)), "step is not a count"),
        (lambda p: _adam_state(p).update(exp_avg=torch.zeros(24, 4).long()), "exp_avg is torch"),
        (lambda p: _first_group(p).update(lr="x"), "lr is not a finite number"),
        (lambda p: _first_group(p).update(betas=(0.9,)), "betas is not 2 finite numbers"),
        (lambda p: _first_group(p).update(amsgrad=True), "amsgrad is not this run's False"),
        (lambda p: _first_group(p).update(differentiable=True), "differentiable is not"),
    ],
    ids=["no-exp_avg", "step-vector", "int-exp_avg", "lr-text", "betas", "amsgrad", "diff"],
)
def test_crafted_optimizer_entries_and_settings_are_one_line(
    tiny: list[str],
    run: Path,
    capsys: pytest.CaptureFixture[str],
    change: Callable[[dict[str, Any]], None],
    field: str,
) -> None:
    """Each failed inside torch's step with a multi-screen traceback (or, for the integer
    ``exp_avg``, trained on): torch copies a saved group's settings over the optimizer's."""
    last = run / "checkpoints" / "last.pt"
    _craft(last, change)
    line = _one_line_exit_2(capsys, _resume(tiny, run))
    assert str(last) in line and field in line, line


# ---------------------------------------------------------------------- row 8: run_info counts


def test_run_info_without_the_counts_the_model_takes_is_one_line(
    run: Path, inputs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An emptied ``info``: a TypeError's traceback from the model's constructor before."""
    path = run / "run_info.json"
    saved = json.loads(path.read_text())
    saved["info"] = {}
    path.write_text(json.dumps(saved))
    _reseal(path)
    line = _one_line_exit_2(capsys, ["predict", str(run), str(inputs)])
    assert str(path) in line and "cannot be built from its info" in line and "num_classes" in line


@pytest.mark.parametrize(
    ("name", "command"), [("run_info.json", "predict"), ("results.json", "report")]
)
def test_json_nested_too_deep_is_one_line(
    run: Path, inputs: Path, capsys: pytest.CaptureFixture[str], name: str, command: str
) -> None:
    """A RecursionError's traceback from ``json.loads`` before."""
    path = run / name
    path.write_text("[" * 200_000 + "]" * 200_000)
    _reseal(path)
    argv = [command, str(run)] + ([str(inputs)] if command == "predict" else [])
    line = _one_line_exit_2(capsys, argv)
    assert str(path) in line and "nested too deep" in line


def test_an_absurd_class_count_in_run_info_is_refused_before_any_list(
    run: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    info_path = run / "run_info.json"
    saved = json.loads(info_path.read_text())
    saved["info"]["num_classes"] = 10**12
    write_json(info_path, saved)

    def never(*_: Any, **__: Any) -> None:
        raise AssertionError("a model was built with num_classes = 10**12")

    monkeypatch.setattr(runs, "meta_model", never)
    monkeypatch.setattr(runs, "build_model", never)
    line = _one_line_exit_2(capsys, ["eval", str(run), "--out", str(run / "e.json")])
    assert line.endswith("run_info.json: info.num_classes=1000000000000; expected 1..100000")


# ---------------------------------------------------------------------- row 10: RNG states


@pytest.mark.parametrize(
    ("generator", "broken"),
    [
        ("numpy", lambda s: s.__setitem__(1, torch.zeros(3, dtype=torch.int64))),
        ("numpy", lambda s: s.__setitem__(0, "NOSUCH")),
        ("numpy", lambda s: s.__setitem__(2, 10**9)),  # numpy's own check: SIGSEGV
        ("torch", lambda s: s.resize_(7)),
        ("python", lambda s: s.__setitem__(1, (1, 2))),
    ],
    ids=["numpy-keys", "numpy-kind", "numpy-pos", "torch", "python"],
)
def test_a_broken_rng_state_is_one_line(
    tiny: list[str],
    run: Path,
    capsys: pytest.CaptureFixture[str],
    generator: str,
    broken: Callable[[Any], None],
) -> None:
    last = run / "checkpoints" / "last.pt"

    def change(payload: dict[str, Any]) -> None:
        state = payload["rng"][generator]
        if isinstance(state, tuple):
            state = payload["rng"][generator] = list(state)
        broken(state)

    _craft(last, change)
    line = _one_line_exit_2(capsys, _resume(tiny, run))
    assert str(last) in line and f"rng.{generator}" in line


def test_best_pt_copied_over_last_pt_still_resumes(tiny: list[str], run: Path) -> None:
    """What a refused ``last.pt``'s message advises: ``best.pt`` is written before its epoch
    ends (``best_epoch == epoch``), a position the checks must accept."""
    ckpt = run / "checkpoints"
    for suffix in ("", ".sha256"):
        (ckpt / f"last.pt{suffix}").write_bytes((ckpt / f"best.pt{suffix}").read_bytes())
    _reseal(ckpt / "last.pt")  # the sidecar names best.pt
    assert main(_resume(tiny, run)) == 0
    assert "epoch 1:" in (run / "app.log").read_text()
