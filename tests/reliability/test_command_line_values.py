"""Wrong values a new user types on the command line fail in one line, exit status 2, naming
what was wrong and what is allowed, before any work.

Each case here once ended otherwise: a model given another kind of examples failed in its first
batch with a traceback ("cannot unpack non-iterable Tree object"); ``dataset=sst`` under the
default experiment failed on a key the user never typed; a run folder that cannot be made was a
traceback of Hydra's; the demo's sizes had no bounds (``--leaves 100000000`` ran until stopped,
``--trees 0`` said "cannot compile an empty batch"); ``foldexp ensemble --batch-size 0`` said
"range() arg 3 must not be zero"; an empty training split said "need at least one array to
stack" (molecules) or that the largest label was -1 (trees).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from foldexp.cli import main
from foldexp.config.errors import ConfigError
from foldexp.train.app import compose_config


def _one_line(capsys: pytest.CaptureFixture[str], command: str) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"foldexp {command}: error: "), err
    return err


@pytest.mark.parametrize(
    "overrides, reads, gives",
    [
        (["model=seq_lstm"], "sentences", "trees"),
        (["model=weave"], "molecules", "trees"),
        (["model=ff_attention"], "sequences of numbers", "trees"),
        (["experiment=sst_lstm", "model=tree_lstm"], "trees", "sentences"),
        (["experiment=esol_weave", "model=child_sum_tree_lstm"], "trees", "molecules"),
        (["experiment=esol_weave", "model=ff_attention"], "sequences of numbers", "molecules"),
    ],
)
def test_a_model_for_other_examples_fails_at_compose_time(
    overrides: list[str], reads: str, gives: str
) -> None:
    with pytest.raises(ConfigError) as err:
        compose_config(overrides)
    message = str(err.value)
    assert (
        f" reads {reads}, but dataset " in message and f" gives {gives}; the models for " in message
    )


def test_the_mismatch_names_the_options_that_fit() -> None:
    with pytest.raises(ConfigError) as err:
        compose_config(["model=seq_lstm"])
    assert str(err.value) == (
        "model seq_lstm (foldexp.models.sequence.SequenceLSTMClassifier) reads sentences, but "
        "dataset calculator gives trees; the models for trees: model=tree_lstm, "
        "child_sum_tree_lstm; the datasets for sentences: dataset=sst_sentences, text_csv (or "
        "an experiment= preset made for either)"
    )
    with pytest.raises(ConfigError, match=r"the datasets for molecules: dataset=esol, freesolv, "):
        compose_config(["model=weave"])


def test_a_dataset_under_the_default_experiment_says_how_to_choose_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["train", "dataset=sst"]) == 2
    err = _one_line(capsys, "train")
    assert "Key 'n' not in 'SSTDataConfig'" in err
    assert err.endswith("experiment=calc_treelstm sets that key for its own dataset and model; "
                        "with another dataset= or model=, choose an experiment made for it "
                        "(foldexp train --help lists them) or none: ~experiment")  # fmt: skip
    compose_config(["~experiment", "dataset=sst"])  # the way out composes


@pytest.mark.parametrize("command", ["train", "bench"])
def test_a_run_folder_that_cannot_be_made_is_one_line(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    assert main([command, f"hydra.run.dir={blocker / 'run'}"]) == 2
    err = _one_line(capsys, command)
    assert f"cannot make the run folder {blocker / 'run'}" in err and "hydra.run.dir" in err


def test_an_output_dir_that_cannot_be_made_names_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    with pytest.raises(SystemExit) as exit_:
        main(["train", f"hydra.run.dir={tmp_path / 'run'}", f"paths.output_dir={blocker / 'x'}",
              "dataset.n=60", "trainer.progress=false"])  # fmt: skip
    assert exit_.value.code == 2
    err = _one_line(capsys, "train")
    assert f"paths.output_dir={blocker / 'x'}: cannot make the run folder" in err


@pytest.mark.parametrize(
    "args, says",
    [
        (["--trees", "0"], "argument --trees: 0; expected 1 <= value <= 1024"),
        (["--leaves", "100000000"], "argument --leaves: 100000000; expected 1 <= value <= 1024"),
        (["--hidden", "0"], "argument --hidden: 0; expected 1 <= value <= 1024"),
        (["--repeats", "0"], "argument --repeats: 0; expected 1 <= value <= 100"),
        (["--seed", "-1"], "argument --seed: -1; expected 0 <= value <= 4294967295"),
        (["--trees", "abc"], "argument --trees: 'abc' is not an integer"),
        (["--trees", "1024", "--leaves", "1024", "--hidden", "1024"],
         "--trees 1024 x --leaves 1024 x --hidden 1024 is 1073741824; expected at most"),
    ],
)  # fmt: skip
def test_the_demos_sizes_have_bounds(
    args: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["demo", *args])
    assert exit_.value.code == 2
    assert says in capsys.readouterr().err


@pytest.mark.parametrize("command", ["ensemble", "predict"])
def test_a_batch_size_below_one_is_refused_naming_the_option(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    extra = [str(tmp_path / "in.txt")] if command == "predict" else []
    with pytest.raises(SystemExit) as exit_:
        main([command, str(tmp_path), *extra, "--batch-size", "0"])
    assert exit_.value.code == 2
    assert "argument --batch-size: 0; expected a value >= 1" in capsys.readouterr().err


def test_an_empty_training_split_says_so(tmp_path: Path) -> None:
    from foldexp.experiments.molecule_data import molecules_csv
    from foldexp.experiments.tree_data import trees_ptb

    data = tmp_path / "m.csv"
    data.write_text("smiles,y\n" + "".join(f"{s},1.0\n" for s in ["CCO", "CCN", "CCC", "CCCl"]))
    with pytest.raises(ConfigError, match=r"the train split is empty \(train 0, dev 0, test 4\)"):
        molecules_csv(str(data), ["y"], fractions=[0, 0, 1])
    trees = tmp_path / "t.txt"
    trees.write_text("(1 (0 a) (1 b))\n(0 (0 c) (1 d))\n")
    with pytest.raises(ConfigError, match=r"the train split is empty \(train 0, dev 0, test 2\)"):
        trees_ptb(str(trees), split="random", fractions=[0, 0, 1])


def test_eval_of_a_run_that_failed_before_training_points_at_its_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "app.log").write_text("")
    with pytest.raises(SystemExit) as exit_:
        main(["eval", str(tmp_path)])
    assert exit_.value.code == 2
    err = _one_line(capsys, "eval")
    assert "has no run_info.json" in err and "see its app.log" in err


def test_an_unknown_option_in_a_list_of_a_group_lists_the_options(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Hydra listed its config search path instead, over four lines."""
    assert main(["train", "logger=[csv,nosuch]"]) == 2
    err = _one_line(capsys, "train")
    assert err.endswith("Could not load 'logger/nosuch'. The options of logger are: csv, none, "
                        "tensorboard")  # fmt: skip


@pytest.mark.parametrize(
    "override, said",
    [
        ("trainer.epoch=3", "trainer.epoch is not a key of trainer (TrainerConfig); did you mean "
                            "trainer.epochs? Its keys are epochs, batch_size"),
        ("+trainer.epoch=3", "trainer.epoch is not a key of trainer (TrainerConfig); did you mean "
                             "trainer.epochs? Its keys are epochs, batch_size"),
        ("traner.epochs=3", "traner is not a key of the config (TrainConfig); did you mean "
                            "trainer? Its keys are seed, task_name"),
        ("optimizer.lr_=0.1", "did you mean optimizer.lr?"),
    ],
)  # fmt: skip
def test_a_misspelt_key_names_the_closest_keys_with_or_without_plus(
    override: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Hydra's advice was to add the key (``+trainer.epoch=3``), which then failed listing keys."""
    try:  # a key added with + is refused by the run's check, which exits
        status = main(["train", override, "trainer.epochs=0"])
    except SystemExit as exit_:
        status = exit_.code
    assert status == 2
    err = _one_line(capsys, "train")
    assert said in err and "+" not in err.split("error: ", 1)[1], err


def test_a_misspelt_dataset_key_of_data_stats_names_the_closest() -> None:
    with pytest.raises(ConfigError, match=r"dataset.pth is not a key of molecules_csv; did you "
                                          r"mean dataset.path\? Its keys are"):  # fmt: skip
        from foldexp.train.app import compose_dataset_config

        compose_dataset_config("molecules_csv", ["pth=x.csv"])
