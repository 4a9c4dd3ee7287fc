"""An Optuna sweep's errors are one line with status 2, and a refused trial fails alone
(issue 52, row 8).

Before: a storage that could not be used (random bytes, a folder, a missing folder, an unknown
driver, a locked database), a study resumed with the other direction and ``n_trials`` <= 0 were
40-91-line tracebacks with status 1; a trial refusing its own config stopped the sweep and left
the trial RUNNING in the study.
"""

from __future__ import annotations

import sqlite3
import warnings
from pathlib import Path

import pytest

from foldexp.cli import main

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # SQLAlchemy 1.4's notice about 2.0, on optuna 2's import
    import optuna

TINY = ["dataset.n=60", "trainer.epochs=1", "trainer.batch_size=16", "trainer.progress=false",
        "trainer.plots=false", "model.hidden_size=8", "model.embed_size=4"]  # fmt: skip


def _sweep(tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    capsys.readouterr()
    sweep = f"hydra.sweep.dir={tmp_path / 'sweep'}"
    tiny = [o for o in TINY if not any(e.startswith(o.split("=")[0] + "=") for e in extra)]
    args = ["train", "-m", "hparams_search=tree_lstm_optuna", *tiny, sweep,
            "hydra.sweeper.study_name=s", *extra]  # fmt: skip
    try:
        code = main(args)
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, capsys.readouterr().err.strip()


def _storages(tmp_path: Path) -> dict[str, str]:
    junk = tmp_path / "junk.db"
    junk.write_bytes(bytes(range(256)) * 16)
    return {
        "random bytes": f"sqlite:///{junk}",
        "a folder": f"sqlite:///{tmp_path}",
        "a missing folder": f"sqlite:///{tmp_path / 'missing' / 'x.db'}",
        "an unknown driver": "nosuch:///x.db",
    }


@pytest.mark.parametrize(
    "case", ["random bytes", "a folder", "a missing folder", "an unknown driver"]
)
def test_a_storage_that_cannot_be_used_is_one_line(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    storage = _storages(tmp_path)[case]
    code, err = _sweep(
        tmp_path, capsys, "hydra.sweeper.n_trials=1", f"hydra.sweeper.storage={storage}"
    )
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "hydra.sweeper.storage=" in err and "Traceback" not in err


def test_a_locked_database_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "study.db"
    optuna.create_study(storage=f"sqlite:///{db}", study_name="s", direction="maximize")
    holder = sqlite3.connect(db, timeout=0)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        code, err = _sweep(
            tmp_path, capsys, "hydra.sweeper.n_trials=1", f"hydra.sweeper.storage=sqlite:///{db}"
        )
    finally:
        holder.rollback()
        holder.close()
    assert code == 2 and len(err.splitlines()) == 1 and "locked" in err, err


def test_a_study_resumed_with_the_other_direction_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "study.db"
    optuna.create_study(storage=f"sqlite:///{db}", study_name="s", direction="minimize")
    code, err = _sweep(
        tmp_path, capsys, "hydra.sweeper.n_trials=1", f"hydra.sweeper.storage=sqlite:///{db}"
    )
    assert code == 2 and len(err.splitlines()) == 1 and "direction" in err, err


@pytest.mark.parametrize("setting", ["hydra.sweeper.n_trials=0", "hydra.sweeper.n_trials=-3",
                                     "hydra.sweeper.n_jobs=0"])  # fmt: skip
def test_no_trials_is_one_line(
    setting: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = _sweep(tmp_path, capsys, setting)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert setting.split("=")[0] in err and "expected an integer >= 1" in err
    assert not (tmp_path / "sweep").exists()


def test_a_refused_trial_fails_alone_and_the_sweep_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "study.db"
    # hidden_size 0 is outside its range: those trials refuse their config
    storage = f"hydra.sweeper.storage=sqlite:///{db}"
    code, err = _sweep(
        tmp_path, capsys, "hydra.sweeper.n_trials=4", storage, "model.hidden_size=choice(0,8)"
    )
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{db}")
    states = {t.number: (t.state.name, t.params["model.hidden_size"]) for t in study.trials}
    assert code == 0, err
    assert len(states) == 4 and all(
        s == ("FAIL" if h == 0 else "COMPLETE") for s, h in states.values()
    ), states
    assert {h for _, h in states.values()} == {0, 8}, states  # both kinds met (seeded sampler)
    assert "model.hidden_size=0; expected" in err
