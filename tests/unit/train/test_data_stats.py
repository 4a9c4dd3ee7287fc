"""``foldexp data stats|import KIND key=value …``: files of one's own, read as training reads
them (the same builder, the same checks, the same split)."""

from __future__ import annotations

from pathlib import Path

import pytest

from foldexp.cli import main as cli_main

REVIEWS = [
    ("a good film", "pos"), ("a dull film", "neg"), ("great fun", "pos"), ("not good", "neg"),
    ("an odd one", "mid"), ("fine I suppose", "mid"), ("truly great", "pos"), ("awful", "neg"),
    ("so so", "mid"), ("a gem", "pos"),
]  # fmt: skip
TREES = ["(1 (0 a) (1 b))", "(0 (0 c) (2 (1 d) (0 e)))", "(2 (2 f) (1 g))"]


def _reviews(tmp_path: Path) -> Path:
    path = tmp_path / "reviews.csv"
    path.write_text("review,stars\n" + "".join(f"{t},{s}\n" for t, s in REVIEWS))
    return path


def test_stats_of_a_text_csv_print_one_row_per_split(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    args = ["path=" + str(_reviews(tmp_path)), "text_column=review", "label_column=stars"]
    assert cli_main(["data", "stats", "text_csv", *args, "--out", str(tmp_path / "o")]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].startswith("| split | examples | mean tokens | max tokens | label labelled")
    assert [line.split(" | ")[1] for line in table[2:5]] == ["8", "1", "1"]  # 0.8 / 0.1 / 0.1
    assert (tmp_path / "o" / "text_csv.png").stat().st_size > 0


def test_stats_of_trees_and_a_bad_key(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    folder = tmp_path / "bank"
    folder.mkdir()
    for split in ("train", "dev", "test"):
        (folder / f"{split}.txt").write_text("\n".join(TREES) + "\n")
    assert cli_main(["data", "stats", "trees_ptb", f"path={folder}", "--out", str(tmp_path)]) == 0
    assert "| mean leaves | max leaves | mean depth |" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_code:
        cli_main(["data", "stats", "trees_ptb", f"pth={folder}"])
    assert exit_code.value.code == 2
    assert "dataset.pth is not a key" in capsys.readouterr().err


def test_import_checks_then_installs_and_says_how_to_train(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    source = _reviews(tmp_path)
    data_dir = tmp_path / "data"
    args = [f"path={source}", "text_column=review", "label_column=stars"]
    assert cli_main(["data", "import", "text_csv", *args, "--data-dir", str(data_dir)]) == 0
    installed = data_dir / "text_csv" / "reviews.csv"
    assert installed.read_text() == source.read_text()
    out = capsys.readouterr().out
    assert "checked" in out and "train 8, dev 1, test 1" in out
    assert f"dataset.path={installed} dataset.text_column=review dataset.label_column=stars" in out


def test_import_refuses_a_bad_file_and_installs_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("review,stars\na good film,pos\n,neg\n")
    data_dir = tmp_path / "data"
    args = [f"path={bad}", "text_column=review", "label_column=stars"]
    with pytest.raises(SystemExit):
        cli_main(["data", "import", "text_csv", *args, "--data-dir", str(data_dir)])
    assert "bad.csv" in capsys.readouterr().err
    assert not (data_dir / "text_csv").exists()


def test_stats_with_an_empty_split_print_its_row(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    path = tmp_path / "three.csv"  # 0.8 / 0.1 / 0.1 of three reviews leaves dev empty
    path.write_text("review,stars\n" + "".join(f"{t},{s}\n" for t, s in REVIEWS[:3]))
    args = [f"path={path}", "text_column=review", "label_column=stars"]
    assert cli_main(["data", "stats", "text_csv", *args, "--out", str(tmp_path / "o")]) == 0
    rows = capsys.readouterr().out.splitlines()[2:5]
    assert [row.split(" | ")[:2] for row in rows] == [
        ["| train", "2"],
        ["| dev", "0"],
        ["| test", "1"],
    ]


def test_import_quotes_what_it_prints_and_keeps_another_file(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    source = tmp_path / "energy.csv"
    source.write_text("review,the stars\n" + "".join(f"{t},{s}\n" for t, s in REVIEWS))
    data_dir = tmp_path / "data"
    args = [f"path={source}", "text_column=review", "label_column=the stars"]
    # --data-dir before the command, as for the named datasets
    assert cli_main(["data", "--data-dir", str(data_dir), "import", "text_csv", *args]) == 0
    assert '"dataset.label_column=the stars"' in capsys.readouterr().out  # pasteable
    assert cli_main(["data", "import", "text_csv", *args, "--data-dir", str(data_dir)]) == 0
    other = tmp_path / "other" / "energy.csv"  # the same name, other rows
    other.parent.mkdir()
    other.write_text(source.read_text().replace("pos", "neg"))
    with pytest.raises(SystemExit):
        cli_main(
            ["data", "import", "text_csv", f"path={other}", *args[1:], "--data-dir", str(data_dir)]
        )
    assert "exists and holds another file" in capsys.readouterr().err
    assert (data_dir / "text_csv" / "energy.csv").read_text() == source.read_text()


@pytest.mark.parametrize("command", ["stats", "import"])
def test_data_stats_help_lists_every_dataset(command: str, capsys: pytest.CaptureFixture) -> None:
    """``foldexp data stats --help`` listed only sst, esol and freesolv."""
    with pytest.raises(SystemExit) as exit_:
        cli_main(["data", command, "--help"])
    assert exit_.value.code == 0
    usage = " ".join(capsys.readouterr().out.split())
    for name in ("esol", "freesolv", "sst", "molecules_csv", "trees_ptb", "text_csv"):
        assert name in usage.split("positional arguments:", 1)[0], name
    assert f"e.g. foldexp data {command} molecules_csv path=FILE" in usage
