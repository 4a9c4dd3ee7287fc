"""``foldexp train --resume RUN_DIR``: a run resumes from its folder alone (its own overrides,
``.hydra/overrides.yaml``), to the same results as an uninterrupted run; an override that would
change what it trains is refused as before, and a folder's override that could run code is not
taken."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from foldexp.cli import main
from foldexp.train.resume_command import expand_resume

VOLATILE = {"train_seconds", "config", "threads"}


def _results(run: Path) -> dict:
    data = json.loads((run / "results.json").read_text())
    return {k: v for k, v in data.items() if k not in VOLATILE}


def test_a_run_resumes_from_its_folder_alone(
    tiny: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    own = [*tiny, "model.hidden_size=12", "trainer.checkpoint_every=1"]
    assert main(["train", *own, "trainer.epochs=2", f"hydra.run.dir={tmp_path / 'ref'}"]) == 0
    cut = tmp_path / "cut"
    assert main(["train", *own, "trainer.epochs=1", f"hydra.run.dir={cut}"]) == 0
    (cut / "results.json").unlink()  # as if killed after its first epoch
    (cut / "results.json.sha256").unlink(missing_ok=True)
    assert main(["train", "--resume", str(cut), "trainer.epochs=2"]) == 0
    assert _results(cut) == _results(tmp_path / "ref")  # hidden_size=12 came from the folder
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:  # what it trains may not change
        main(["train", "--resume", str(cut), "model.hidden_size=32", "trainer.epochs=3"])
    assert exit_.value.code == 2 and "model.hidden_size" in capsys.readouterr().err


def test_what_resume_takes_from_a_folder(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    saved = run / ".hydra" / "overrides.yaml"
    saved.write_text("- model.hidden_size=12\n- trainer.resume=true\n- hydra.run.dir=elsewhere\n")
    assert expand_resume(["--resume", str(run), "trainer.epochs=4"]) == [
        "model.hidden_size=12", "trainer.epochs=4", "trainer.resume=true",
        f"hydra.run.dir={run}",
    ]  # fmt: skip
    assert expand_resume(["trainer.epochs=4"]) == ["trainer.epochs=4"]
    saved.write_text("- hydra.callbacks.x._target_=os.system\n")
    with pytest.raises(ValueError, match=r"is not taken from a folder \(it could run code\)"):
        expand_resume([f"--resume={run}"])
    saved.write_text("- model._target_=evil.Model\n")
    with pytest.raises(ValueError, match="is not taken from a folder"):
        expand_resume(["--resume", str(run)])
    with pytest.raises(ValueError, match="no .hydra/overrides.yaml"):
        expand_resume(["--resume", str(tmp_path)])
    with pytest.raises(ValueError, match="leave out -m"):
        expand_resume(["-m", "--resume", str(run)])
    with pytest.raises(ValueError, match="--resume needs the run folder"):
        expand_resume(["--resume"])
