"""``foldexp ensemble``: members rebuilt from their run folders score exactly as their own
``results.json`` says, the ensemble averages their root probabilities, and runs that cannot be
ensembled (other examples, no checkpoint, no runs) are refused with the folder named."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from foldexp.analysis.ensemble import run_ensemble
from foldexp.cli import main
from foldexp.data.sst import load_sst
from foldexp.data.vocab import Vocabulary
from foldexp.models.tree_lstm import TreeLSTMClassifier
from foldexp.train.app import compose_config
from foldexp.train.loop import run_train


def _train(overrides: Callable[..., list[str]], out: Path, seed: int, *extra: str) -> dict:
    return run_train(compose_config(overrides(f"seed={seed}", *extra), out))


@pytest.fixture
def sweep(sst_overrides, tmp_path: Path) -> Path:
    for seed in (1, 2, 3):
        _train(sst_overrides, tmp_path / "sweep" / str(seed - 1), seed)
    return tmp_path / "sweep"


def test_members_score_as_their_runs_and_the_ensemble_averages(sweep: Path) -> None:
    result = run_ensemble([sweep])
    runs = [json.loads((sweep / str(k) / "results.json").read_text()) for k in range(3)]
    assert [m["seed"] for m in result["members"]] == [1, 2, 3]
    for member, run in zip(result["members"], runs):
        assert member["accuracy"] == pytest.approx(run["test_accuracy"], abs=1e-12)
        assert member["binary_accuracy"] == pytest.approx(run["test_binary_accuracy"], abs=1e-12)
    assert result["by_size"][0]["accuracy"] == result["members"][0]["accuracy"]
    assert result["ensemble"] == {k: v for k, v in result["by_size"][-1].items() if k != "members"}
    assert (sweep / "ensemble.json").exists() and "ensemble of 3" in (
        sweep / "ensemble.md"
    ).read_text()


def test_an_ensemble_of_copies_is_the_model_itself(sweep: Path, tmp_path: Path) -> None:
    copies = tmp_path / "copies"
    for k in range(3):
        shutil.copytree(sweep / "0", copies / str(k))
    result = run_ensemble([copies], split="dev")
    single = result["members"][0]
    for size in result["by_size"]:
        assert size["accuracy"] == pytest.approx(single["accuracy"], abs=1e-12)


def test_score_roots_takes_the_argmax_and_sums_polar_probabilities(sst_data_dir: Path) -> None:
    trees = load_sst("train", sst_data_dir)
    model = TreeLSTMClassifier(
        Vocabulary.from_trees(trees), 5, 4, 4, polarity=([0, 1], [3, 4])
    ).eval()
    probs = torch.tensor(
        [
            [0.30, 0.00, 0.10, 0.30, 0.30],  # argmax 0; positive 0.6 > negative 0.3
            [0.10, 0.10, 0.60, 0.10, 0.10],  # argmax 2; a tie of 0.2 is not positive
            [0.00, 0.10, 0.00, 0.50, 0.40],  # argmax 3
        ]
    )
    labels = torch.tensor([0, 2, 4])
    sums = {k: float(v) for k, v in model.score_roots(probs, labels).items()}
    assert sums == {
        "root_correct": 2.0,  # rows 0 and 1
        "root_count": 3.0,
        "root_binary_correct": 1.0,  # row 2 (label 4, says positive); row 0 says positive, is 0
        "root_binary_count": 2.0,  # labels 0 and 4
    }
    assert model.summarize(sums) == {"accuracy": 2 / 3, "binary_accuracy": 0.5}


def test_runs_scored_on_other_examples_are_refused(sweep: Path, sst_overrides) -> None:
    _train(sst_overrides, sweep / "binary", 4, "dataset.view=binary")
    with pytest.raises(ValueError, match=r"test examples of .*binary differ.*dataset.view"):
        run_ensemble([sweep])


def test_missing_runs_and_checkpoints_are_named(sweep: Path, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no results.json under"):
        run_ensemble([tmp_path / "data"])
    (sweep / "1" / "checkpoints" / "best.pt").unlink()
    with pytest.raises(FileNotFoundError, match=r"sweep/1 has results.json but no checkpoints"):
        run_ensemble([sweep])


def test_command_line(sweep: Path, tmp_path: Path) -> None:
    assert main(["ensemble", str(sweep), "--split", "dev", "--out", str(tmp_path / "out")]) == 0
    written = json.loads((tmp_path / "out" / "ensemble.json").read_text())
    assert written["split"] == "dev" and len(written["members"]) == 3


def test_sequence_lstm_runs_ensemble_too(sst_overrides, tmp_path: Path) -> None:
    sweep = tmp_path / "lstm"
    for seed in (1, 2):
        overrides = [o for o in sst_overrides() if not o.startswith("experiment=")]
        run = sweep / str(seed)
        run_train(compose_config(["experiment=sst_lstm", f"seed={seed}", *overrides], run))
    result = run_ensemble([sweep])
    for member, seed in zip(result["members"], (1, 2)):
        run = json.loads((sweep / str(seed) / "results.json").read_text())
        assert member["accuracy"] == pytest.approx(run["test_accuracy"], abs=1e-12)
    assert set(result["ensemble"]) == {"accuracy"}


def test_models_without_class_probabilities_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A molecule or regression sweep: one line and status 2 (it was a TypeError's traceback)."""
    lengths = ["n_train=16", "n_dev=8", "n_test=8", "min_len=4", "max_len=6"]
    overrides = [
        "experiment=addition_attention",
        "model.hidden_size=4",
        "trainer.epochs=1",
        "trainer.progress=false",
        "trainer.plots=false",
        *(f"dataset.{s}" for s in lengths),
    ]
    run_train(compose_config(overrides, tmp_path / "attention" / "0"))
    with pytest.raises(ValueError, match=r"attention/0: .* has no root_probabilities"):
        run_ensemble([tmp_path / "attention"])
    from foldexp.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["ensemble", str(tmp_path / "attention")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("foldexp ensemble: error: ")
    assert "has no root_probabilities" in err[0] and "foldexp ensemble: " not in err[0][9:]


def test_an_error_line_names_its_command_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It was ``foldexp ensemble: error: foldexp ensemble: …`` (a shared reader's own prefix)."""
    from foldexp.cli import main

    for command in ("ensemble", "report"):
        with pytest.raises(SystemExit) as exit_:
            main([command, str(tmp_path / "nowhere")])
        assert exit_.value.code == 2
        err = capsys.readouterr().err.strip()
        assert err == f"foldexp {command}: error: {tmp_path / 'nowhere'} does not exist"
