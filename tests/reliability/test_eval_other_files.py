"""``foldexp eval`` scores a trained classifier on a file of one's own, whatever share of its
classes the file holds, and says how to name columns that have other names.

Before: a text file whose examples were all one class was refused ("a classifier needs two"),
and a file holding some of the classes got class ids of its own (the sorted names present) and
was refused as another task; a molecule file of one class was refused because its ROC AUC does
not exist, where the loss does; a tree file without the largest label was another task too. A
renamed column named the column but not the key that names it, and a molecule run could not be
scored on a file whose target column has another name at all.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from foldexp.analysis.evaluate_run import run_eval
from foldexp.cli import main
from foldexp.config.errors import ConfigError
from foldexp.data.errors import FormatError
from foldexp.train.app import compose_config
from foldexp.train.loop import run_train

QUICK = [
    "trainer.epochs=1",
    "trainer.batch_size=4",
    "trainer.progress=false",
    "trainer.plots=false",
]
TEXTS = {"pos": ["a good film", "great fun", "truly great", "a gem"],
         "neg": ["a dull film", "not good", "awful", "so dull"],
         "mid": ["an odd one", "so so", "fine I suppose", "middling"]}  # fmt: skip


def _text_csv(path: Path, rows: list[tuple[str, str]], header: str = "text,label") -> Path:
    path.write_text(header + "\n" + "".join(f"{text},{label}\n" for text, label in rows))
    return path


@pytest.fixture(scope="module")
def text_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A classifier of three named classes: mid, neg, pos (class ids 0, 1, 2)."""
    root = tmp_path_factory.mktemp("text")
    rows = [(t, label) for label, texts in TEXTS.items() for t in texts] * 3
    data = _text_csv(root / "train.csv", rows)
    overrides = ["experiment=text_csv", f"dataset.path={data}", "model.hidden_size=6",
                 "model.embed_size=5", *QUICK]  # fmt: skip
    run_train(compose_config(overrides, root / "run"))
    return root / "run"


@pytest.mark.parametrize("classes", [["pos"], ["neg"], ["pos", "neg"]])
def test_a_file_of_some_of_the_classes_is_scored_with_the_runs_ids(
    text_run: Path, tmp_path: Path, classes: list[str]
) -> None:
    rows = [(t, label) for label in classes for t in TEXTS[label]]
    data = _text_csv(tmp_path / "some.csv", rows)
    scored = run_eval(text_run, [f"dataset.path={data}"], split="all", out=tmp_path / "e.json")
    assert scored["examples"] == len(rows) and 0.0 <= scored["all_accuracy"] <= 1.0
    # the same examples inside a file of every class score the same: the ids are the run's
    every = [(t, label) for label in TEXTS for t in TEXTS[label]]
    whole = _text_csv(tmp_path / "every.csv", every + rows)
    both = run_eval(text_run, [f"dataset.path={whole}"], split="all", out=tmp_path / "w.json")
    right = both["all_accuracy"] * len(every + rows) - _correct(text_run, tmp_path, every)
    assert right == pytest.approx(scored["all_accuracy"] * len(rows))


def _correct(run: Path, tmp_path: Path, rows: list[tuple[str, str]]) -> float:
    data = _text_csv(tmp_path / "part.csv", rows)
    scored = run_eval(run, [f"dataset.path={data}"], split="all", out=tmp_path / "p.json")
    return scored["all_accuracy"] * len(rows)


def test_a_label_that_is_not_one_of_the_runs_classes_is_named_with_its_line(
    text_run: Path, tmp_path: Path
) -> None:
    data = _text_csv(tmp_path / "new.csv", [("a good film", "pos"), ("meh", "meh")])
    with pytest.raises(FormatError, match=r"new\.csv:3: label 'meh' is not one of the trained "
                       r"run's classes \(mid, neg, pos\)"):  # fmt: skip
        run_eval(text_run, [f"dataset.path={data}"], split="all", out=tmp_path / "e.json")


def test_a_renamed_label_column_says_which_key_names_it(
    text_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [(t, "pos") for t in TEXTS["pos"]]
    data = _text_csv(tmp_path / "renamed.csv", rows, header="text,sentiment")
    with pytest.raises(SystemExit) as exit_:
        main(["eval", str(text_run), f"dataset.path={data}", "--out", str(tmp_path / "e.json")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"foldexp eval: error: {data}: no column 'label', which dataset.label_column names; the "
        "header has 'text', 'sentiment'. Name the file's column with dataset.label_column=COL"
    )
    overrides = [f"dataset.path={data}", "dataset.label_column=sentiment"]
    scored = run_eval(text_run, overrides, split="all", out=tmp_path / "e.json")
    assert scored["examples"] == len(rows)


SMILES = [
    "CCO", "CCCC", "c1ccccc1", "CC(=O)O", "CCN", "OCCO", "c1ccncc1", "CC(C)O", "ClCCl",
    "CCOCC", "C1CCCCC1", "c1ccc2ccccc2c1", "CC#N", "CCCl", "O=C1CCCCC1", "Cc1ccccc1",
]  # fmt: skip
SIZES = ["model.atom_size=6", "model.pair_size=4", "model.graph_size=6", "model.mlp_size=6"]


@pytest.fixture(scope="module")
def molecule_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 0/1 classifier (ROC AUC), trained on a split of its own: dev and test have both."""
    root = tmp_path_factory.mktemp("mol")
    folds = ["train"] * 8 + ["valid"] * 4 + ["test"] * 4
    labels = [0, 1] * 8
    data = root / "train.csv"
    data.write_text("smiles,active,fold\n" + "".join(
        f"{s},{y},{f}\n" for s, y, f in zip(SMILES, labels, folds)))  # fmt: skip
    overrides = ["experiment=molecules_csv", f"dataset.path={data}", "dataset.targets=[active]",
                 "dataset.task=classification", "dataset.split=column", "dataset.split_column=fold",
                 "dataset.cache_dir=null", *SIZES, *QUICK]  # fmt: skip
    run_train(compose_config(overrides, root / "run"))
    return root / "run"


RANDOM = ["dataset.split=random", "dataset.split_column=null"]


def test_a_molecule_file_of_one_class_is_scored_and_its_aucs_are_not_defined(
    molecule_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "actives.csv"
    data.write_text("smiles,active\n" + "".join(f"{s},1\n" for s in SMILES))
    out = tmp_path / "e.json"
    assert main(["eval", str(molecule_run), f"dataset.path={data}", *RANDOM, "--split", "all",
                 "--out", str(out)]) == 0  # fmt: skip
    printed = json.loads(capsys.readouterr().out)  # valid JSON: null, not NaN
    assert printed["examples"] == len(SMILES) and printed["all_loss"] > 0
    assert printed["all_roc_auc"] is None and printed["all_prc_auc"] is None
    assert printed["undefined"] == ["all_prc_auc", "all_roc_auc"]
    assert json.loads(out.read_text()) == printed


def test_a_renamed_target_column_is_named_and_can_be_pointed_at(
    molecule_run: Path, tmp_path: Path
) -> None:
    data = tmp_path / "renamed.csv"
    rows = "".join(f"{s},{k % 2},{1 - k % 2}\n" for k, s in enumerate(SMILES))
    data.write_text("smiles,activity,other\n" + rows)
    with pytest.raises(ConfigError) as err:
        run_eval(molecule_run, [f"dataset.path={data}", *RANDOM], "all", tmp_path / "e.json")
    assert str(err.value) == (
        f"{data}: no column 'active', which dataset.targets names; the header has 'smiles', "
        "'activity', 'other'. Name the file's column with dataset.targets=[COL]"
    )
    named = [f"dataset.path={data}", *RANDOM, "dataset.targets=[activity]"]
    scored = run_eval(molecule_run, named, "all", tmp_path / "e.json")
    assert scored["examples"] == len(SMILES) and 0 <= scored["all_roc_auc"] <= 1
    with pytest.raises(ConfigError, match=r"num_targets=2 but .* with num_targets=1"):
        run_eval(molecule_run, [*named[:-1], "dataset.targets=[activity,other]"], "all")


def test_a_missing_split_column_says_how_to_split_at_random(
    molecule_run: Path, tmp_path: Path
) -> None:
    data = tmp_path / "nofold.csv"
    data.write_text("smiles,active\n" + "".join(f"{s},{k % 2}\n" for k, s in enumerate(SMILES)))
    says = (r"no column 'fold', which dataset\.split_column names; .*\(or cut the file at "
            r"random: dataset\.split=random dataset\.split_column=null\)")  # fmt: skip
    with pytest.raises(ConfigError, match=says):
        run_eval(molecule_run, [f"dataset.path={data}"], "all", tmp_path / "e.json")


def test_a_tree_file_without_the_largest_label_is_the_runs_task(tmp_path: Path) -> None:
    """Without dataset.num_classes the classes were the file's largest label + 1."""
    trees = tmp_path / "trees"
    trees.mkdir()
    for split in ("train", "dev", "test"):
        (trees / f"{split}.txt").write_text("(2 (1 a) (2 good))\n(0 (0 dull) (1 film))\n")
    overrides = ["experiment=trees_ptb", f"dataset.path={trees}", "model.hidden_size=6",
                 "model.embed_size=5", *QUICK]  # fmt: skip
    run_train(compose_config(overrides, tmp_path / "run"))
    other = tmp_path / "other"
    other.mkdir()
    for split in ("train", "dev", "test"):
        (other / f"{split}.txt").write_text("(1 (0 a) (1 film))\n(0 (0 dull) (0 one))\n")
    scored = run_eval(tmp_path / "run", [f"dataset.path={other}"], "all", tmp_path / "e.json")
    assert scored["examples"] == 6 and 0 <= scored["all_accuracy"] <= 1
