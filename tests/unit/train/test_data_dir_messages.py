"""A missing dataset tells ``foldexp train``'s own way to name the data folder
(``paths.data_dir=DIR``): it suggested a ``--data-dir`` flag that only ``foldexp data`` has."""

from __future__ import annotations

from pathlib import Path

import pytest

from foldexp.data.errors import DataError
from foldexp.data.molecules import not_found
from foldexp.train.app import compose_config
from foldexp.train.loop import run_train


def test_a_missing_sst_names_the_train_key(tmp_path: Path) -> None:
    cfg = compose_config(["experiment=sst_treelstm", f"paths.data_dir={tmp_path}"], tmp_path / "r")
    with pytest.raises(DataError) as err:
        run_train(cfg)
    message = str(err.value)
    assert "foldexp train paths.data_dir=DIR" in message and "foldexp data --data-dir" in message
    assert "unless --data-dir" not in message


def test_a_missing_molecule_preset_names_the_train_key(tmp_path: Path) -> None:
    message = str(not_found("esol", tmp_path / "esol.csv"))
    assert "foldexp train paths.data_dir=DIR" in message and "unless --data-dir" not in message
