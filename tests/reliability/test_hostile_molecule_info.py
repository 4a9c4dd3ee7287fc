"""A molecule run's ``run_info.json`` whose lists do not fit its counts costs one line.

A crafter reseals the file (a sha256 is easy to compute); the counts are bounded
(``runs._check_counts``), but a ``target_mean`` of three values for one target reached the
model's constructor and failed a ``reshape`` with a RuntimeError traceback in ``foldexp
predict``. The constructor now refuses it by name and the reader names the file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from foldexp.cli import main
from foldexp.train.app import compose_config
from foldexp.train.artifacts import checksum_path, file_sha256
from foldexp.train.loop import run_train

SMILES = ["CCO", "CCCC", "c1ccccc1", "CC(=O)O", "CCN", "OCCO", "c1ccncc1", "CC(C)O"] * 2


@pytest.fixture(scope="module")
def molecule_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("molecule_run")
    data = root / "mols.csv"
    data.write_text("smiles,logp\n" + "".join(f"{s},{k / 10:.1f}\n" for k, s in enumerate(SMILES)))
    overrides = ["experiment=molecules_csv", "model=dmpnn", f"dataset.path={data}",
                 "dataset.targets=[logp]", f"paths.cache_dir={root / 'cache'}",
                 "model.hidden_size=8", "trainer.epochs=1", "trainer.batch_size=8",
                 "trainer.progress=false", "trainer.plots=false"]  # fmt: skip
    run_train(compose_config(overrides, root / "run"))
    return root


@pytest.mark.parametrize("key", ["target_mean", "target_std"])
def test_a_target_list_longer_than_the_targets_is_one_line(
    molecule_run: Path,
    key: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("FOLDEXP_TRACEBACK", raising=False)
    path = molecule_run / "run" / "run_info.json"
    original = path.read_bytes()
    saved = json.loads(original)
    saved["info"][key] = [0.5, 0.5, 0.5]
    try:
        path.write_text(json.dumps(saved))
        checksum_path(path).write_text(f"{file_sha256(path)}  {path.name}\n", encoding="ascii")
        with pytest.raises(SystemExit) as exit_:
            main(["predict", str(molecule_run / "run"), str(molecule_run / "mols.csv")])
        assert exit_.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and str(path) in err[0], err
        assert f"{key} holds 3 values for num_targets=1" in err[0]
    finally:
        path.write_bytes(original)
        checksum_path(path).write_text(f"{file_sha256(path)}  {path.name}\n", encoding="ascii")
