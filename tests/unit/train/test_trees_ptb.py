"""``experiment=trees_ptb``: PTB trees of one's own by config alone (folder or one file split at
random), label checks naming file and line, the binary model refusing trees that are not binary
before training, the child-sum model training on them, SST as a preset with the same trees as
before, and ``tree_inputs`` for ``foldexp predict``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from foldexp.analysis.predict import run_predict
from foldexp.config.errors import ConfigError
from foldexp.data.errors import FormatError
from foldexp.data.sst import load_sst
from foldexp.data.trees import NO_LABEL, Tree
from foldexp.experiments import datasets
from foldexp.experiments.tree_data import sst_options, trees_ptb
from foldexp.experiments.tree_files import collapse_unary_chains
from foldexp.experiments.tree_inputs import right_branching, tree_inputs
from foldexp.models.tree_lstm import TreeLSTMClassifier
from foldexp.train.app import compose_config
from foldexp.train.loop import run_train

# Three classes, binary trees; -1 marks a node without a label.
BINARY = [
    "(2 (1 a) (2 (2 good) (1 film)))",
    "(0 (0 dull) (-1 film))",
    "(1 (1 an) (1 (0 odd) (2 one)))",
    "(2 (2 great) (2 fun))",
]
# The same sentences as a treebank writes them: unary chains and a node of three children.
WIDE = [
    "(2 (1 a) (2 good) (1 film))",
    "(0 (0 (0 dull)) (1 film))",
    "(1 (1 an) (1 (0 odd) (2 one)))",
]
QUICK = [
    "experiment=trees_ptb",
    "model.hidden_size=6",
    "model.embed_size=5",
    "trainer.epochs=1",
    "trainer.limit_batches=2",
    "trainer.batch_size=2",
    "trainer.progress=false",
    "trainer.plots=false",
]


def _folder(root: Path, lines: dict[str, list[str]] | list[str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for split in ("train", "dev", "test"):
        content = lines if isinstance(lines, list) else lines[split]
        (root / f"{split}.txt").write_text("\n".join(content) + "\n", encoding="utf-8")
    return root


def test_trains_on_a_folder_of_trees_by_config_alone(tmp_path: Path) -> None:
    data = _folder(tmp_path / "trees", BINARY)
    results = run_train(compose_config([*QUICK, f"dataset.path={data}"], tmp_path / "run"))
    assert 0.0 <= results["test_accuracy"] <= 1.0 and 0.0 <= results["test_node_accuracy"] <= 1
    assert not any("binary" in key for key in results)  # no sentiment metric unless asked
    info = json.loads((tmp_path / "run" / "run_info.json").read_text())["info"]
    assert info["num_classes"] == 3 and info["class_names"] == ["0", "1", "2"]


def test_predict_keeps_each_line_a_row_with_a_short_reason(tmp_path: Path) -> None:
    data = _folder(tmp_path / "trees", BINARY)
    run_train(compose_config([*QUICK, f"dataset.path={data}"], tmp_path / "run"))
    lines = tmp_path / "in.txt"
    lines.write_text(f"{BINARY[0]}\n\n{WIDE[0]}\n(2 (1 unclosed)\n")
    rows = run_predict(tmp_path / "run", str(lines), tmp_path / "out.csv")
    reasons = [row["error"] for row in rows]
    assert len(rows) == 4 and reasons[0] == "" and reasons[1] == "empty input"
    assert "exactly two children" in reasons[2] and "OneOf(" not in reasons[2]
    assert reasons[3].startswith(f"{lines}:4:")  # the file's own line


def test_polarity_asks_for_the_binary_score(tmp_path: Path) -> None:
    data = _folder(tmp_path / "trees", BINARY)
    overrides = [*QUICK, f"dataset.path={data}", "dataset.polarity=[[0],[2]]"]
    results = run_train(compose_config(overrides, tmp_path / "run"))
    assert 0.0 <= results["test_binary_accuracy"] <= 1.0


def test_one_file_split_at_random_follows_the_seed(tmp_path: Path) -> None:
    path = tmp_path / "all.txt"
    path.write_text("\n".join(BINARY * 5) + "\n")
    split = {"split": "random", "fractions": [0.6, 0.2, 0.2]}
    a = trees_ptb(str(path), seed=1, **split)
    assert (len(a.train), len(a.dev), len(a.test)) == (12, 4, 4)
    b = trees_ptb(str(path), seed=2, **split)
    assert [t.to_ptb() for t in a.dev] != [t.to_ptb() for t in b.dev]
    cfg = compose_config([*QUICK, f"dataset.path={path}", "dataset.split=random", "seed=3"])
    assert cfg.dataset.seed == 3  # the run seed unless given
    with pytest.raises(ConfigError, match="dataset.split=random"):
        trees_ptb(str(path))  # one file, but split=files


def test_info_is_json_apart_from_vocab_and_embeddings(tmp_path: Path) -> None:
    bundle = trees_ptb(str(_folder(tmp_path / "t", BINARY)), class_names=["neg", "mid", "pos"])
    plain = {k: v for k, v in bundle.info.items() if k not in ("vocab", "embeddings")}
    assert json.loads(json.dumps(plain)) == plain
    assert plain["class_names"] == ["neg", "mid", "pos"] and plain["non_binary_tree"] is None


@pytest.mark.parametrize(
    "lines, options, message",
    [
        ({"train": BINARY, "dev": ["(0 a)", "(7 b)"], "test": BINARY}, {}, r"dev.txt:2: label 7"),
        ({"train": BINARY, "dev": BINARY, "test": ["", "(1 (-2 a) (1 b))"]}, {}, r"test.txt:2:"),
        (BINARY, {"num_classes": 2}, r"train.txt:1: label 2, but dataset.num_classes=2"),
        (BINARY, {"label_map": [0, 1]}, r"train.txt:1: label 2 has no entry in dataset.label_map"),
        (["(0 a)", "(0 b)"], {}, "two classes at least"),
    ],
)
def test_labels_out_of_range_name_the_file_and_line(
    tmp_path: Path, lines, options: dict, message: str
) -> None:
    with pytest.raises(FormatError, match=message):
        trees_ptb(str(_folder(tmp_path / "t", lines)), **options)


def test_a_stray_label_does_not_widen_an_inferred_class_count(tmp_path: Path, caplog) -> None:
    """Labels 0-2 and one 9: without dataset.num_classes that is a typo named by its line,
    not a ten-class model; declaring the count (or a dev tree holding 3..8) makes it real."""
    stray = [*BINARY, "(9 (1 a) (2 b))"]
    data = _folder(tmp_path / "t", {"train": stray, "dev": BINARY, "test": BINARY})
    with pytest.raises(
        FormatError,
        match=r"train\.txt:5: label 9 makes 10 classes \(dataset\.num_classes is not set\), but "
        r"no node in any split has label 3\.\.8: the labels are 0\.\.2, 9\. A mistyped label\?"
        r".* set dataset\.num_classes=10",
    ):
        trees_ptb(str(data))
    with pytest.raises(FormatError, match=r"train\.txt:5: label 9, but dataset.num_classes=3 "):
        trees_ptb(str(data), num_classes=3)
    assert trees_ptb(str(data), num_classes=10).info["num_classes"] == 10
    full = [f"({k} (0 a) (1 b))" for k in range(3, 9)]
    whole = _folder(tmp_path / "w", {"train": stray, "dev": BINARY + full, "test": BINARY})
    with caplog.at_level("INFO", logger="foldexp.experiments.tree_data"):
        assert trees_ptb(str(whole)).info["num_classes"] == 10
    assert "trees_ptb: 10 classes, 0..9, from the training labels" in caplog.text
    counted_from_1 = [t.replace("(0 ", "(3 ") for t in BINARY]  # labels 1, 2, 3
    data = _folder(tmp_path / "c", counted_from_1)
    with pytest.raises(FormatError, match=r"has label 0: .* dataset\.label_map=\[-1,0,1,2\] "):
        trees_ptb(str(data))
    assert trees_ptb(str(data), label_map=[-1, 0, 1, 2]).info["num_classes"] == 3


def test_a_parse_error_names_the_file_line_and_column(tmp_path: Path) -> None:
    data = _folder(tmp_path / "t", {"train": BINARY, "dev": ["(1 a", "(0 b)"], "test": BINARY})
    with pytest.raises(FormatError, match=r"dev.txt:1:\d+: expected '\)'"):
        trees_ptb(str(data))


def test_binary_model_refuses_wide_trees_before_training(tmp_path: Path) -> None:
    data = _folder(tmp_path / "t", {"train": BINARY, "dev": BINARY, "test": WIDE})
    cfg = compose_config([*QUICK, f"dataset.path={data}"], tmp_path / "run")
    with pytest.raises(ValueError, match=r"test.txt:1 has a node with 3 children.*child_sum"):
        run_train(cfg)
    assert not (tmp_path / "run" / "metrics.csv").exists()
    unary = _folder(tmp_path / "u", {"train": BINARY, "dev": BINARY, "test": WIDE[1:]})
    cfg = compose_config([*QUICK, f"dataset.path={unary}"], tmp_path / "run2")
    with pytest.raises(ValueError, match=r"test.txt:1 has a node with 1 child \(dataset.collapse"):
        run_train(cfg)


def test_child_sum_model_trains_on_any_arity(tmp_path: Path) -> None:
    data = _folder(tmp_path / "t", WIDE)
    overrides = [*QUICK, f"dataset.path={data}", "model=child_sum_tree_lstm", "model.hidden_size=6"]
    results = run_train(compose_config(overrides, tmp_path / "run"))
    assert 0.0 <= results["test_node_accuracy"] <= 1.0


def test_collapsed_unary_chains_let_the_binary_model_train(tmp_path: Path) -> None:
    data = _folder(tmp_path / "t", BINARY[:2] + WIDE[1:])
    overrides = [*QUICK, f"dataset.path={data}", "dataset.collapse_unary=true"]
    results = run_train(compose_config(overrides, tmp_path / "run"))
    assert 0.0 <= results["test_accuracy"] <= 1.0


def test_collapse_keeps_the_upper_label() -> None:
    chain = Tree(3, children=[Tree(2, children=[Tree(1, "a")])])
    assert collapse_unary_chains(chain) == Tree(3, "a")
    unlabelled = Tree(0, children=[Tree(NO_LABEL, children=[Tree(2, "x")]), Tree(1, "y")])
    assert collapse_unary_chains(unlabelled).to_ptb() == "(0 (2 x) (1 y))"


@pytest.mark.parametrize("view, neutral", [("fine", False), ("binary", False), ("binary", True)])
@pytest.mark.parametrize("labels", ["all", "root"])
def test_sst_preset_reads_the_same_trees_as_before(
    sst_data_dir: Path, view: str, neutral: bool, labels: str
) -> None:
    bundle = datasets.sst(str(sst_data_dir), view=view, labels=labels, neutral_nodes=neutral)
    for split, trees in zip(("train", "dev", "test"), (bundle.train, bundle.dev, bundle.test)):
        want = load_sst(split, sst_data_dir, view=view, labels=labels, neutral_nodes=neutral)
        assert trees == want
    general = trees_ptb(str(sst_data_dir / "sst"), labels=labels, **sst_options(view, neutral))
    assert general.train == bundle.train


def test_sst_binary_predicts_two_named_classes(sst_data_dir: Path) -> None:
    info = datasets.sst(str(sst_data_dir), view="binary", neutral_nodes=True).info
    model = TreeLSTMClassifier(
        info["vocab"], info["num_classes"], 5, 4, predict_classes=info["predict_classes"],
        class_names=info["class_names"],
    ).eval()  # fmt: skip
    assert model.prediction_columns() == ["p_negative", "p_positive"]
    trees = [t for t, _ in tree_inputs(["(1 (0 a) (1 gem))", "a fine film"])]
    with torch.no_grad():
        probs = model.predict(model.collate(trees))
    assert probs.shape == (2, 2)
    torch.testing.assert_close(probs.sum(1), torch.ones(2))


def test_tree_inputs_read_trees_sentences_and_refuse_per_row() -> None:
    rows = tree_inputs(
        [
            "(3 (2 It) (4 works))",
            "(S (NP the cat) (VP sat))",
            "( (S (NP (DT the) (NN cat)) (VP (VBD sat))))",
            "a fine film",
            "",
            "(2 (2 unclosed)",
            "half (open",
        ]
    )
    trees = [tree for tree, _ in rows]
    assert trees[0] == Tree(3, children=[Tree(2, "It"), Tree(4, "works")])
    assert trees[1].to_ptb() == "(-1 (-1 (-1 the) (-1 cat)) (-1 sat))"  # a phrase leaf split
    assert trees[2].words() == ["the", "cat", "sat"]
    assert set(trees[2].labels()) == {NO_LABEL}
    assert trees[3] == right_branching(["a", "fine", "film"])
    assert trees[3].to_ptb() == "(-1 (-1 a) (-1 (-1 fine) (-1 film)))"
    assert [error is None for _, error in rows] == [True] * 4 + [False] * 3
    assert rows[4][1] == "empty input"
    assert rows[5][1].startswith("<input>:6:")
    named = tree_inputs(["(3 (2 It) (4 works))", "", "(2 (2 unclosed)"], source="new.txt")
    assert named[2][1].startswith("new.txt:3:")  # the file's own line: blank lines count
    collapsed = tree_inputs(["( (S (NP (DT the) (NN cat)) (VP (VBD sat))))"], collapse_unary=True)
    assert collapsed[0][0].to_ptb() == "(-1 (-1 (-1 the) (-1 cat)) (-1 sat))"


@pytest.mark.parametrize(
    "override, message",
    [
        ("dataset.num_classes=1", "dataset.num_classes=1"),
        ("dataset.split=folds", "split"),
        ("dataset.label_map=[0,-2]", "dataset.label_map"),
        ("dataset.polarity=[[0],[-1]]", "dataset.polarity"),
        ("+dataset.pth=x", "dataset.pth"),
    ],
)
def test_bad_keys_fail_when_composed(override: str, message: str) -> None:
    with pytest.raises(Exception, match=message):
        compose_config([*QUICK, "dataset.path=x", override])


def test_an_unset_or_missing_path_says_what_to_give(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="dataset.path is not set"):
        trees_ptb("???")
    with pytest.raises(FileNotFoundError, match="dataset.dev_file"):
        (tmp_path / "t").mkdir()
        (tmp_path / "t" / "train.txt").write_text(BINARY[0] + "\n")
        trees_ptb(str(tmp_path / "t"))
