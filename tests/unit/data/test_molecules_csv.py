"""Reading molecule CSVs of one's own: gzip by magic bytes, other separators, the refusals
(non-finite or float32-overflowing targets, empty target columns, header-only files, non-UTF-8
bytes, damaged gzip), the split column, and the ranking scores the classifier reports."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from foldexp.data.delimiters import sniff_delimiter, sniff_text_delimiter
from foldexp.data.errors import DataWarning, FormatError, MoleculeError
from foldexp.data.molecule_csv import read_csv_column
from foldexp.data.molecules import check_molecule_csv, load_molecule_csv
from foldexp.data.splits import column_split
from foldexp.models.scores import average_precision, roc_auc

CSV = "name,smiles,y1,y2\na,CCO,1.5,\nb,c1ccccc1,-2,3\nc, CC(=O)O ,nan,4\n"


def _write(tmp_path: Path, text: str, name: str = "mols.csv") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _same(a, b) -> None:
    assert a.smiles == b.smiles and a.rows.tolist() == b.rows.tolist()
    np.testing.assert_array_equal(a.targets, b.targets)
    np.testing.assert_array_equal(a.target_mask, b.target_mask)


# ---------------------------------------------------------------------- formats


@pytest.mark.parametrize("name", ["mols.csv.gz", "mols.csv"])  # the bytes decide, not the name
def test_gzip_is_read_by_its_magic_bytes(tmp_path: Path, name: str) -> None:
    plain = load_molecule_csv(_write(tmp_path, CSV, "plain.csv"), target_columns=["y1", "y2"])
    path = tmp_path / "gz" / name
    path.parent.mkdir()
    path.write_bytes(gzip.compress(CSV.encode()))
    _same(load_molecule_csv(path, target_columns=["y1", "y2"]), plain)


@pytest.mark.parametrize("sep", [";", "\t"])
def test_semicolon_and_tab_separated_files(tmp_path: Path, sep: str) -> None:
    plain = load_molecule_csv(_write(tmp_path, CSV, "plain.csv"), target_columns=["y1", "y2"])
    other = load_molecule_csv(
        _write(tmp_path, CSV.replace(",", sep), "other.csv"), target_columns=["y1", "y2"]
    )
    _same(other, plain)


def test_sniff_delimiter_prefers_comma_on_a_tie() -> None:
    assert sniff_delimiter("smiles,y") == ","
    assert sniff_delimiter("smiles;y;z") == ";"
    assert sniff_delimiter("smiles\ty") == "\t"
    assert sniff_delimiter("smiles") == ","
    assert sniff_delimiter("a;b,c") == ","


def test_sniff_delimiter_reads_the_rows_too() -> None:
    # Column names holding commas in a tab file: the rows agree with tabs only.
    header = "SMILES\tlogP, measured\tlogP, predicted"
    assert sniff_delimiter(header, ["CCO\t-0.3\t-0.1", "c1ccccc1\t2.1\t2.0"]) == "\t"
    assert sniff_delimiter(header) == ","  # the header alone: comma on the tie
    # A quoted semicolon is one field; the rows agree with semicolons.
    assert sniff_delimiter('name;"a;b";smiles', ["x;1;CCO", "y;2;CCN"]) == ";"
    # Rows that agree with no separator leave the header's count to decide.
    assert sniff_delimiter("smiles;y;z", ["CCO,1", "CCN"]) == ";"
    assert sniff_text_delimiter("SMILES\tlogP, m\n\nCCO\t1.5\n") == "\t"


def test_a_tab_file_whose_column_names_hold_commas(tmp_path) -> None:
    path = tmp_path / "tab.csv"
    path.write_text("SMILES\tlogP, measured\tlogP, predicted\nCCO\t-0.31\t-0.2\nCCN\t-0.13\t0.1\n")
    assert read_csv_column(path, "logP, measured") == {1: "-0.31", 2: "-0.13"}


# ---------------------------------------------------------------------- refusals


@pytest.mark.parametrize("value", ["inf", "-Infinity", "1e39", "-3.5e38"])
def test_targets_float32_cannot_hold_are_refused(tmp_path: Path, value: str) -> None:
    path = _write(tmp_path, f"smiles,y\nCCO,1\nCCC,{value}\n")
    with pytest.raises(MoleculeError, match=r"mols\.csv:3: row 2, column 'y': expected a finite"):
        load_molecule_csv(path, target_columns="y")


def test_largest_float32_is_accepted(tmp_path: Path) -> None:
    ds = load_molecule_csv(_write(tmp_path, "smiles,y\nCCO,3.4e38\n"), target_columns="y")
    assert np.isfinite(ds.targets).all()


def test_an_all_empty_target_column_is_refused_by_name(tmp_path: Path) -> None:
    path = _write(tmp_path, "smiles,y,z\nCCO,1,\nCCC,2,nan\n")
    with pytest.raises(MoleculeError, match=r"target column\(s\) \['z'\] hold no value"):
        load_molecule_csv(path, target_columns=["y", "z"])


def test_a_column_named_twice_is_refused(tmp_path: Path) -> None:
    with pytest.raises(MoleculeError, match=r"mols\.csv:1: column\(s\) \['y'\] named twice"):
        load_molecule_csv(_write(tmp_path, "smiles,y,y\nCCO,1,2\n"), target_columns=["y"])
    with pytest.raises(MoleculeError, match=r"column\(s\) \['y'\] named twice"):
        load_molecule_csv(_write(tmp_path, "smiles,y\nCCO,1\n"), target_columns=["y", "y"])
    # a repeated column no one asks for is harmless
    load_molecule_csv(_write(tmp_path, "smiles,y,note,note\nCCO,1,a,b\n"), target_columns="y")


def test_header_only_and_empty_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(MoleculeError, match=r"mols\.csv: has a header but no data rows"):
        load_molecule_csv(_write(tmp_path, "smiles,y\n\n"), target_columns="y")
    with pytest.raises(MoleculeError, match=r"empty\.csv: expected a CSV header line"):
        load_molecule_csv(_write(tmp_path, "", "empty.csv"), target_columns="y")


def test_non_utf8_bytes_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "latin1.csv"
    path.write_bytes("smiles,y\nCCO,1\nCCC,2\nCC(=O)O,3 \xe9\n".encode("latin-1"))
    with pytest.raises(FormatError, match=r"latin1\.csv:4:11: expected UTF-8 text, got byte 0xe9"):
        load_molecule_csv(path, target_columns="y")
    gz = tmp_path / "latin1.csv.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    with pytest.raises(FormatError, match=r"latin1\.csv\.gz:4:11: expected UTF-8"):
        load_molecule_csv(gz, target_columns="y")


def test_a_damaged_gzip_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "cut.csv.gz"
    path.write_bytes(gzip.compress(CSV.encode() * 50)[:40])
    with pytest.raises(FormatError, match=r"cut\.csv\.gz: a damaged gzip file"):
        load_molecule_csv(path, target_columns="y1")


def test_check_without_featurising_and_target_summary(tmp_path: Path) -> None:
    path = _write(tmp_path, "smiles,y,active\nCCO,1.5,1\nxyz,2.5,\nCCN,,0\n")
    assert check_molecule_csv(path, smiles_column="smiles", target_columns=["y", "active"]) == 3
    with pytest.raises(MoleculeError, match=r"expected column\(s\) \['z'\]"):
        check_molecule_csv(path, smiles_column="smiles", target_columns=["z"])
    with pytest.warns(DataWarning, match="1 invalid SMILES"):
        ds = load_molecule_csv(path, target_columns=["y", "active"], on_invalid="skip")
    y, active = ds.target_summary()
    assert y == {
        "target": "y", "labelled": 1, "missing": 1, "kind": "numeric",
        "mean": 1.5, "std": 0.0, "min": 1.5, "max": 1.5,
    }  # fmt: skip
    assert active == {
        "target": "active",
        "labelled": 2,
        "missing": 0,
        "kind": "binary",
        "positives": 1,
    }


# ---------------------------------------------------------------------- split column


def test_read_csv_column_numbers_rows_like_the_loader(tmp_path: Path) -> None:
    path = _write(tmp_path, "smiles;y;fold\nCCO;1;Train\n\nCCC;2;TEST\n")
    assert read_csv_column(path, "fold") == {1: "Train", 3: "TEST"}
    assert load_molecule_csv(path, target_columns="y").rows.tolist() == [1, 3]


def test_column_split_names_parts_in_any_case() -> None:
    labels = ["train", "Valid", "TEST", "dev", "train", "validation", "Test", "train"]
    train, dev, test = column_split(labels, list(range(1, 9)))
    assert train.tolist() == [0, 4, 7] and dev.tolist() == [1, 3, 5] and test.tolist() == [2, 6]


def test_column_split_train_test_only_draws_dev_from_train_seeded() -> None:
    labels = ["train"] * 18 + ["test"] * 2
    rows = list(range(1, 21))
    a = column_split(labels, rows, (0.8, 0.1, 0.1), seed=0)
    b = column_split(labels, rows, (0.8, 0.1, 0.1), seed=0)
    c = column_split(labels, rows, (0.8, 0.1, 0.1), seed=1)
    assert [p.tolist() for p in a] == [p.tolist() for p in b]
    assert a[1].tolist() != c[1].tolist()
    train, dev, test = a
    assert len(dev) == 2 and len(train) == 16  # 0.1 / 0.9 of 18
    assert test.tolist() == [18, 19] and not set(dev) & set(train)
    assert sorted([*train, *dev]) == list(range(18))


def test_column_split_says_when_it_draws_dev_from_train(caplog: pytest.LogCaptureFixture) -> None:
    """It carved dev out of the train rows without a word; a dev value needs no draw."""
    labels = ["train"] * 18 + ["test"] * 2
    with caplog.at_level("WARNING", logger="foldexp.data.splits"):
        column_split(labels, list(range(1, 21)), (0.8, 0.1, 0.1), 3, "f.csv: column 'fold'")
    assert caplog.messages == [
        "f.csv: column 'fold' names train and test rows only: dev is 2 of its 18 train rows, "
        "drawn at random (seed 3; its share from dataset.fractions); to choose them, give those "
        "rows the value valid (or dev)"
    ]
    caplog.clear()
    with caplog.at_level("WARNING", logger="foldexp.data.splits"):
        parts = column_split(["train", "dev", "test"], [1, 2, 3])
    assert [p.tolist() for p in parts] == [[0], [1], [2]] and not caplog.messages


def test_column_split_refuses_unknown_values_and_missing_parts() -> None:
    with pytest.raises(
        FormatError, match=r"f\.csv: column 'fold': row 7 \(line 8\) says 'holdout'"
    ):
        column_split(["train", "holdout"], [1, 7], where="f.csv: column 'fold'")
    with pytest.raises(FormatError, match="row 2 .* says ''"):
        column_split(["train", "", "test"], [1, 2, 3])
    with pytest.raises(FormatError, match="no row says test"):
        column_split(["train", "valid"], [1, 2])


# ---------------------------------------------------------------------- scores


def test_roc_auc_matches_a_hand_count_with_ties() -> None:
    labels = [0, 1, 1, 0, 1]
    scores = [0.5, 0.5, 0.9, 0.1, 0.5]
    # Positive-negative pairs: (0.5|0.5)=1/2, (0.5|0.1)=1, (0.9|0.5)=1, (0.9|0.1)=1,
    # (0.5|0.5)=1/2, (0.5|0.1)=1 -> 5 of 6 pairs.
    assert roc_auc(labels, scores) == pytest.approx(5 / 6)
    assert roc_auc([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8]) == pytest.approx(0.75)
    assert roc_auc([1, 0], [0.2, 0.9]) == 0.0 and roc_auc([0, 1], [0.3, 0.3]) == 0.5
    with pytest.raises(ValueError, match="both classes"):
        roc_auc([1, 1], [0.2, 0.3])


def test_average_precision_matches_a_hand_computation() -> None:
    # Thresholds 0.9 (P=1, R=1/3), 0.5 (P=3/4, R=1), 0.1 (adds no recall).
    assert average_precision([0, 1, 1, 0, 1], [0.5, 0.5, 0.9, 0.1, 0.5]) == pytest.approx(
        1 / 3 + (2 / 3) * 0.75
    )
    # Ranked 0.8 (+, P=1, R=1/2), 0.4 (-), 0.35 (+, P=2/3, R=1).
    assert average_precision([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8]) == pytest.approx(
        0.5 + 0.5 * 2 / 3
    )
    with pytest.raises(ValueError, match="0 or 1"):
        average_precision([0, 2], [0.1, 0.2])
