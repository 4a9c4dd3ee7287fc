"""``experiment=text_csv``: sentence classification from a CSV of one's own by config alone —
labels as integers or names, gzip by magic bytes, random or column splits, invalid rows refused
or skipped naming the line, non-UTF-8 refused naming the line, and ``text_inputs`` for
``foldexp predict``."""

from __future__ import annotations

import gzip
import json
import logging
from pathlib import Path

import pytest
import torch

from foldexp.config.errors import ConfigError
from foldexp.data.errors import FormatError
from foldexp.data.sequences import read_text_csv, tokenize
from foldexp.experiments.text_data import text_csv, text_inputs
from foldexp.models.sequence import SequenceLSTMClassifier
from foldexp.train.app import compose_config
from foldexp.train.loop import run_train

ROWS = [
    ("a good film", "pos"),
    ("a dull film", "neg"),
    ("great fun", "pos"),
    ("not good at all", "neg"),
    ("an odd one", "mid"),
    ("fine , I suppose", "mid"),
    ("truly great", "pos"),
    ("awful", "neg"),
    ("so so", "mid"),
    ("a gem", "pos"),
]
QUICK = [
    "experiment=text_csv",
    "model.hidden_size=6",
    "model.embed_size=5",
    "trainer.epochs=1",
    "trainer.limit_batches=2",
    "trainer.batch_size=2",
    "trainer.progress=false",
    "trainer.plots=false",
]


def _csv(path: Path, rows: list[tuple], header: str = "review,sentiment") -> Path:
    lines = [header] + [",".join(f'"{cell}"' for cell in row) for row in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_trains_from_a_csv_by_config_alone(tmp_path: Path) -> None:
    path = _csv(tmp_path / "reviews.csv", ROWS)
    overrides = [
        *QUICK,
        f"dataset.path={path}",
        "dataset.text_column=review",
        "dataset.label_column=sentiment",
    ]
    results = run_train(compose_config(overrides, tmp_path / "run"))
    assert 0.0 <= results["test_accuracy"] <= 1.0
    info = json.loads((tmp_path / "run" / "run_info.json").read_text())["info"]
    assert info["class_names"] == ["mid", "neg", "pos"] and info["num_classes"] == 3


def test_names_become_sorted_class_ids_and_integers_stay(tmp_path: Path) -> None:
    named = text_csv(str(_csv(tmp_path / "a.csv", ROWS)), text_column="review",
                     label_column="sentiment", fractions=[1.0, 0.0, 0.0])  # fmt: skip
    assert named.info["class_names"] == ["mid", "neg", "pos"]
    assert sorted(named.train) == sorted(
        (text.split(), ["mid", "neg", "pos"].index(label)) for text, label in ROWS
    )
    numbered = [(text, str(["neg", "mid", "pos"].index(label))) for text, label in ROWS]
    ints = text_csv(str(_csv(tmp_path / "b.csv", numbered, "text,label")))
    assert ints.info["class_names"] == ["0", "1", "2"]
    assert json.dumps({k: v for k, v in ints.info.items() if k not in ("vocab", "embeddings")})


def test_gzip_is_known_by_its_magic_bytes(tmp_path: Path) -> None:
    plain = _csv(tmp_path / "a.csv", ROWS)
    packed = tmp_path / "b.data"  # no .gz suffix: the bytes decide
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert read_text_csv(packed, "review", "sentiment") == read_text_csv(
        plain, "review", "sentiment"
    )


def test_tab_files_read_and_an_unquoted_separator_is_refused(tmp_path: Path) -> None:
    plain = _csv(tmp_path / "a.csv", ROWS)
    tab = tmp_path / "a.tsv"  # texts with commas, unquoted: a tab file needs no quotes
    tab.write_text("review\tsentiment\n" + "".join(f"{t}, really\t{y}\n" for t, y in ROWS))
    got = read_text_csv(tab, "review", "sentiment")
    assert [(r.text, r.label) for r in got] == [
        (r.text + ", really", r.label) for r in read_text_csv(plain, "review", "sentiment")
    ]
    unquoted = tmp_path / "u.csv"
    unquoted.write_text("review,sentiment\ngreat,pos\nawful, just awful,neg\n")
    with pytest.raises(FormatError, match=r"u.csv:3: 3 fields, but the header has 2; quote"):
        read_text_csv(unquoted, "review", "sentiment")


def test_split_column(tmp_path: Path) -> None:
    names = ["train", "train", "TRAIN", "train", "valid", "dev", "test", "test", "train", "train"]
    rows = [(text, label, split) for (text, label), split in zip(ROWS, names)]
    path = _csv(tmp_path / "s.csv", rows, "text,label,part")
    bundle = text_csv(str(path), split="column", split_column="part")
    assert (len(bundle.train), len(bundle.dev), len(bundle.test)) == (6, 2, 2)
    rows[3] = (rows[3][0], rows[3][1], "holdout")
    with pytest.raises(FormatError, match=r"s.csv:5: split 'holdout' in column 'part'"):
        text_csv(str(_csv(path, rows, "text,label,part")), split="column", split_column="part")


def test_invalid_rows_are_refused_naming_the_line_or_skipped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rows = [*ROWS[:3], ("  ", "pos"), *ROWS[3:6], ("no label here", ""), *ROWS[6:]]
    path = _csv(tmp_path / "r.csv", rows, "text,label")
    with pytest.raises(FormatError, match=r"r.csv:5: empty text in column 'text'.*on_invalid=skip"):
        text_csv(str(path))
    with caplog.at_level(logging.WARNING, logger="foldexp.experiments.text_data"):
        bundle = text_csv(str(path), on_invalid="skip", fractions=[1.0, 0.0, 0.0])
    assert len(bundle.train) == len(ROWS)
    (record,) = [r for r in caplog.records if "skipped" in r.getMessage()]
    assert "skipped 2 invalid row(s)" in record.getMessage()
    assert "line 5: empty text" in record.getMessage()
    assert "line 9: no label in column 'label'" in record.getMessage()


def test_a_quoted_newline_keeps_the_line_numbers_right(tmp_path: Path) -> None:
    path = tmp_path / "q.csv"
    path.write_text('text,label\n"two\nlines",pos\n"",neg\n', encoding="utf-8")
    with pytest.raises(FormatError, match=r"q.csv:4: empty text"):
        text_csv(str(path))


def test_non_utf8_and_missing_columns_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "latin.csv"
    path.write_bytes("text,label\ngood,pos\ncaf\u00e9,neg\n".encode("latin-1"))
    with pytest.raises(FormatError, match=r"latin.csv:3:4: expected UTF-8 text, got byte 0xe9"):
        text_csv(str(path))
    says = r"a\.csv: no column 'body', which dataset\.text_column names; the header has 'review'"
    with pytest.raises(ConfigError, match=says):
        text_csv(str(_csv(tmp_path / "a.csv", ROWS)), text_column="body")


def test_tokenizers_and_lowercase() -> None:
    assert tokenize("A  Good\tfilm ") == ["A", "Good", "film"]
    assert tokenize(" Ab c", "chars", lowercase=True) == ["a", "b", " ", "c"]
    rows = text_inputs(["A good film", "  ", "Ab"], "chars", True)
    assert rows[0] == ((list("a good film"), -1), None)
    assert rows[1] == (None, "empty text")
    assert text_inputs(["x"], "morphemes")[0][0] is None  # an unknown tokenizer: a row error


def test_sequence_model_predicts_named_class_probabilities(tmp_path: Path) -> None:
    bundle = text_csv(str(_csv(tmp_path / "a.csv", ROWS, "text,label")))
    info = bundle.info
    model = SequenceLSTMClassifier(
        info["vocab"], info["num_classes"], 4, 5, class_names=info["class_names"]
    ).eval()
    assert model.prediction_columns() == ["p_mid", "p_neg", "p_pos"]
    examples = [x for x, _ in text_inputs(["a good film", "unseen words"], "whitespace", False)]
    with torch.no_grad():
        probs = model.predict(model.collate(examples))
    assert probs.shape == (2, 3)
    torch.testing.assert_close(probs.sum(1), torch.ones(2))


def test_an_unset_path_says_what_to_give() -> None:
    with pytest.raises(ConfigError, match="dataset.path is not set"):
        text_csv("???")
