"""Data files that used to be accepted and then fail later: refused at load, naming file and line.

Word vectors with NaN/inf or rows of the wrong width, SST imports with non-binary trees, labels
out of range or broken bytes (named by the user's file, never the staged copy), and JSON files
whose errors name them.
"""

from __future__ import annotations

import gzip
import io
import json
import re
import zipfile
from pathlib import Path

import pytest

from foldexp.analysis.predict_inputs import read_inputs
from foldexp.analysis.report import collect_results
from foldexp.data import fetch
from foldexp.data.cli import main
from foldexp.data.errors import DataWarning, FetchError, FormatError, TreeParseError
from foldexp.data.jsonfile import read_json
from foldexp.data.molecule_csv import read_molecule_rows
from foldexp.data.ptb import read_ptb_file
from foldexp.data.sequences import read_text_csv
from foldexp.data.sst import load_sst, read_sst_file
from foldexp.data.vocab import Vocabulary
from foldexp.data.wordvec import align_word_vectors, read_word_vectors, word_vector_width
from foldexp.experiments.tree_files import load_tree_splits
from foldexp.train.artifacts import write_text

TREES = {
    "train": "(3 (2 It) (4 (2 is) (4 good)))\n(1 (2 Not) (1 good))\n",
    "dev": "(2 (2 So) (2 so))\n",
    "test": "(4 (2 -LRB-) (4 great))\n",
}

# ------------------------------------------------------------------ word vectors


@pytest.mark.parametrize("value", ["nan", "NaN", "-Infinity", "inf"])
@pytest.mark.parametrize("wanted", [None, {"a"}])  # the bad row converted, or only scanned
def test_a_non_finite_vector_is_refused_naming_file_and_line(
    tmp_path: Path, value: str, wanted: set[str] | None
) -> None:
    path = tmp_path / "vec.txt"
    path.write_text(f"a 1 2 3\n\nb 1 {value} 3\n", encoding="utf-8")
    expected = r"vec\.txt:3: expected 3 finite numbers after the word, but value 2 is not finite"
    with pytest.raises(FormatError, match=expected):
        read_word_vectors(path, wanted)


def test_a_value_beyond_float32_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "vec.txt.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("a 1 2 3\nb 1 2 1e39\n")
    with pytest.raises(FormatError, match=r"vec\.txt\.gz:2: .* value 3 is not finite"):
        align_word_vectors(path, Vocabulary.from_tokens(["a", "b"]))


def test_a_row_of_the_wrong_width_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "vec.txt"
    path.write_text("2 3\na 1 2 3\nb 1 2 3 4\n", encoding="utf-8")  # word2vec header: d = 3
    with pytest.raises(FormatError, match=r"vec\.txt:3: expected a word and 3 values, got 4"):
        read_word_vectors(path)


def test_the_width_of_a_vector_file_is_known_before_loading_it(tmp_path: Path) -> None:
    plain = tmp_path / "plain.txt"
    plain.write_text("\nthe 0.1 0.2 0.3 0.4\ncat 1 2 3 4\n", encoding="utf-8")
    header = tmp_path / "w2v.txt.gz"
    with gzip.open(header, "wt", encoding="utf-8") as f:
        f.write("2 5\nthe 1 2 3 4 5\ncat 1 2 3 4 5\n")
    assert word_vector_width(plain) == 4 and word_vector_width(header) == 5
    aligned = align_word_vectors(plain, Vocabulary.from_tokens(["the", "dog"]))
    assert aligned.width == 4 == aligned.matrix.shape[1]
    empty = tmp_path / "empty.txt"
    empty.write_text("\n", encoding="utf-8")
    with pytest.raises(FormatError, match=r"empty\.txt: expected GloVe vectors"):
        word_vector_width(empty)
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"\xff\xfe 1 2\n")
    with pytest.raises(FormatError, match=r"bad\.txt:1:1: expected UTF-8 text, got byte 0xff"):
        word_vector_width(bad)


def test_the_real_glove_subset_is_50_wide(data_root: Path) -> None:
    assert word_vector_width(data_root / "wordvec" / "glove.6B.50d.sst_vocab.txt.gz") == 50


# ------------------------------------------------------------------ SST import


def _folder(tmp_path: Path, **override: str) -> Path:
    folder = tmp_path / "mine"
    folder.mkdir()
    for split, text in {**TREES, **override}.items():
        (folder / f"{split}.txt").write_bytes(
            text.encode("utf-8") if isinstance(text, str) else text
        )
    return folder


@pytest.mark.parametrize(
    ("tree", "column", "children"),
    [("(3 (2 a) (2 b) (2 c))", 1, "3 children"), ("(3 (2 (2 a)) (2 b))", 4, "1 child")],
)
def test_import_refuses_a_non_binary_tree_naming_the_users_file(
    tmp_path: Path, tree: str, column: int, children: str
) -> None:
    folder = _folder(tmp_path, dev=f"(2 (2 So) (2 so))\n\n{tree}\n")
    mine = re.escape(str(folder / "dev.txt"))
    expected = rf"^{mine}:3:{column}: expected a binary tree .* got a node with {children}$"
    with pytest.raises(TreeParseError, match=expected):
        fetch.import_dataset("sst", folder, tmp_path / "data")
    assert not (tmp_path / "data" / "sst").exists()  # nothing installed
    # a file placed in the data folder by hand is refused when loaded, too
    (tmp_path / "data" / "sst").mkdir(parents=True)
    (tmp_path / "data" / "sst" / "dev.txt").write_text(tree + "\n", encoding="utf-8")
    with pytest.raises(TreeParseError, match=rf"dev\.txt:1:{column}: expected a binary tree"):
        load_sst("dev", tmp_path / "data")


def test_a_label_out_of_range_names_the_zip_and_member(tmp_path: Path, capsys) -> None:
    archive = tmp_path / "trainDevTestTrees_PTB.zip"
    with zipfile.ZipFile(archive, "w") as z:
        broken = {**TREES, "train": "(3 (2 It) (2 is))\n(7 (2 Not) (1 good))\n"}
        for split, text in broken.items():
            z.writestr(f"trees/{split}.txt", text)
    where = re.escape(f"{archive}/trees/train.txt:2:2")
    with pytest.raises(TreeParseError, match=rf"^{where}: expected a label in 0\.\.4, got 7$"):
        fetch.import_dataset("sst", archive, tmp_path / "data")
    assert main(["--data-dir", str(tmp_path / "data"), "import", "sst", str(archive)]) == 2
    err = capsys.readouterr().err
    assert f"foldexp data import: error: {archive}/trees/train.txt:2:2" in err
    assert "import-sst" not in err  # never the staging folder


def test_non_utf8_trees_name_the_users_file_and_line(tmp_path: Path) -> None:
    folder = _folder(tmp_path, test=b"(4 (2 -LRB-) (4 great))\n(4 (2 caf\xe9) (4 ok))\n")
    mine = re.escape(str(folder / "test.txt"))
    with pytest.raises(TreeParseError, match=rf"^{mine}:2:10: expected UTF-8 text, got byte 0xe9"):
        fetch.import_dataset("sst", folder, tmp_path / "data")


def test_a_good_import_still_installs(tmp_path: Path) -> None:
    with pytest.warns(DataWarning, match="train.txt has 2 trees"):
        fetch.import_dataset("sst", _folder(tmp_path), tmp_path / "data")
    assert [t.label for t in read_sst_file(tmp_path / "data" / "sst" / "train.txt")] == [3, 1]


def test_a_damaged_zip_is_refused_naming_it(tmp_path: Path) -> None:
    archive = tmp_path / "trees.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_STORED) as z:
        for split, text in TREES.items():
            z.writestr(f"trees/{split}.txt", text)
    data = bytearray(archive.read_bytes())
    at = data.index(b"(3 (2 It)")
    data[at + 1] = ord("4")  # the bytes no longer match the stored CRC
    archive.write_bytes(bytes(data))
    with pytest.raises(FetchError, match=rf"{re.escape(str(archive))} is damaged: trees/train"):
        fetch.import_dataset("sst", archive, tmp_path / "data")


def test_the_cli_reports_an_os_error_as_a_message(tmp_path: Path, monkeypatch, capsys) -> None:
    def denied(*args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied", str(tmp_path / "mine" / "train.txt"))

    monkeypatch.setattr(fetch, "import_dataset", denied)
    monkeypatch.setattr("foldexp.data.commands.import_dataset", denied)
    assert main(["--data-dir", str(tmp_path), "import", "sst", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "foldexp data import: error: [Errno 13] Permission denied" in err
    assert str(tmp_path / "mine" / "train.txt") in err


# ------------------------------------------------------------------ JSON files


def test_read_json_names_the_file_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text('{"a": 1,\n "b": }\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"x\.json:2:7: expected valid JSON: Expecting value"):
        read_json(path)
    path.write_bytes(b'{"a": 1,\n "b": "caf\xe9"}\n')
    with pytest.raises(FormatError, match=r"x\.json:2: expected UTF-8 JSON text, got byte 0xe9"):
        read_json(path)
    path.write_bytes(b'\xef\xbb\xbf{"a": [1, 2]}')  # a byte-order mark is fine
    assert read_json(path) == {"a": [1, 2]}


def test_report_names_a_broken_results_file(tmp_path: Path) -> None:
    good, bad = tmp_path / "run1", tmp_path / "run2"
    good.mkdir()
    bad.mkdir()
    write_text(good / "results.json", json.dumps({"test_accuracy": 0.5}), checksum=True)
    write_text(bad / "results.json", '{"test_accuracy": 0.5', checksum=True)  # cut, yet sealed
    where = re.escape(str(bad / "results.json"))
    with pytest.raises(ValueError, match=rf"^{where}:1:22: expected valid JSON"):
        collect_results([tmp_path])


def test_report_reads_a_run_whose_overrides_file_is_not_utf8(tmp_path: Path) -> None:
    # Someone else's run folder: its overrides only label the row, so a stray byte is replaced.
    run = tmp_path / "run1"
    (run / ".hydra").mkdir(parents=True)
    write_text(run / "results.json", json.dumps({"test_accuracy": 0.5}), checksum=True)
    (run / ".hydra" / "overrides.yaml").write_bytes(b"- model.hidden=64\n- note=caf\xe9\n")
    row = collect_results([tmp_path]).iloc[0]
    assert row["overrides"] == "model.hidden=64 note=caf\ufffd"


def test_one_input_a_line_breaks_at_line_breaks_only(tmp_path: Path) -> None:
    # A form feed or U+2028 inside a line is not a line break: rows keep the file's line numbers.
    path = tmp_path / "in.txt"
    path.write_bytes("CCO\nC\x0cC\u2028O\r\nCCC\rCN\n\n".encode())
    assert read_inputs(str(path), None) == ("input", ["CCO", "C\x0cC\u2028O", "CCC", "CN"])


# ------------------------------------------------------------------ one reader for every text file

# Every reader of a user's text file, with a file it accepts. Line 3 holds "cafe": the bad copies
# write "café" in Latin-1 there, so the refusal must name line 3 and the column of the "é".
TEXT_READERS = {
    "molecule CSV": (
        "smiles,y\nCCO,1\nC cafe,2\nCCC,3\n",
        lambda p: read_molecule_rows(p, "smiles", ("y",))[:2],
    ),
    "text CSV": (
        "text,label\ngood,pos\nat the cafe,neg\nbad,neg\n",
        lambda p: read_text_csv(p, "text", "label"),
    ),
    "PTB trees": (
        "(3 (2 It) (4 good))\n\n(1 (2 cafe) (1 bad))\n",
        lambda p: [t.to_ptb() for t in read_ptb_file(p)],
    ),
    "SST trees": (
        "(3 (2 It) (4 good))\n\n(1 (2 cafe) (1 bad))\n",
        lambda p: [t.to_ptb() for t in read_sst_file(p)],
    ),
    "tree files": (
        "(1 (0 a) (1 b))\n(0 (0 c) (1 d))\n(1 (1 cafe) (0 e))\n" + "(0 (1 f) (0 g))\n" * 7,
        lambda p: _tree_splits(p),
    ),
    "word vectors": (
        "the 0.1 0.2\nof 0.3 0.4\ncafe 0.5 0.6\n",
        lambda p: (
            word_vector_width(p),
            {w: v.tolist() for w, v in read_word_vectors(p)[0].items()},
        ),
    ),
    "predict's input": (
        "name,smiles\na,CCO\ncafe,CCC\nc,CCN\n",
        lambda p: read_inputs(str(p), "smiles"),
    ),
}


def _tree_splits(path: Path) -> tuple[list, list]:
    """A tree file split at random: its trees, and the line each came from."""
    splits = load_tree_splits(str(path), split="random")
    return [[t.to_ptb() for t in s] for s in splits.trees], [
        [o.rsplit(":", 1)[1] for o in origins] for origins in splits.origins
    ]


@pytest.mark.parametrize("reader", sorted(TEXT_READERS))
def test_every_reader_of_a_users_text_file_reads_it_the_same_way(
    tmp_path: Path, reader: str
) -> None:
    """gzip known by its magic bytes (whatever the name) and a byte-order mark are accepted;
    a Latin-1 byte is refused naming file:line:column and what to do, a damaged gzip stream
    naming the file -- by every reader, in the same words."""
    text, read = TEXT_READERS[reader]
    plain = tmp_path / "plain.txt"
    plain.write_text(text, encoding="utf-8")
    packed = tmp_path / "packed.txt"  # gzip without .gz in its name
    packed.write_bytes(gzip.compress(text.encode("utf-8")))
    bom = tmp_path / "bom.txt"
    bom.write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))
    assert read(packed) == read(plain) == read(bom)
    column = text.split("\n")[2].index("cafe") + 4  # the "é" of "café", 1-based
    latin = text.replace("cafe", "caf\u00e9").encode("latin-1")
    for name, data in (("latin.txt", latin), ("latin.gz", gzip.compress(latin))):
        (tmp_path / name).write_bytes(data)
        where = re.escape(f"{tmp_path / name}:3:{column}")
        with pytest.raises(
            FormatError, match=rf"^{where}: expected UTF-8 text, got byte 0xe9; save the file as"
        ):
            read(tmp_path / name)
    damaged = tmp_path / "damaged.gz"
    damaged.write_bytes(gzip.compress(text.encode("utf-8") * 20)[:-12])  # truncated
    with pytest.raises(FormatError, match=rf"^{re.escape(str(damaged))}: a damaged gzip file"):
        read(damaged)


def test_predicts_standard_input_is_read_as_a_file_is(monkeypatch) -> None:
    def stdin(data: bytes) -> None:
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))

    stdin(gzip.compress(b"\xef\xbb\xbfCCO\nCCC\n"))
    assert read_inputs("-", None) == ("input", ["CCO", "CCC"])
    stdin(b"CCO\ncaf\xe9\n")
    with pytest.raises(FormatError, match=r"^<stdin>:2:4: expected UTF-8 text, got byte 0xe9"):
        read_inputs("-", None)


def test_a_damaged_gzip_import_names_the_users_file(tmp_path: Path) -> None:
    folder = _folder(tmp_path, dev=gzip.compress(TREES["dev"].encode("utf-8") * 50)[:30])
    mine = re.escape(str(folder / "dev.txt"))
    with pytest.raises(FormatError, match=rf"^{mine}: a damaged gzip file"):
        fetch.import_dataset("sst", folder, tmp_path / "data")
    assert not (tmp_path / "data" / "sst").exists()


def test_a_gzipped_sst_file_names_the_node_that_is_not_binary(tmp_path: Path) -> None:
    path = tmp_path / "dev.txt"
    path.write_bytes(gzip.compress(b"(2 (2 So) (2 so))\n\n(3 (2 a) (2 b) (2 c))\n"))
    with pytest.raises(TreeParseError, match=r"dev\.txt:3:1: expected a binary tree"):
        read_sst_file(path)
