"""Schemas of the ``dataset`` group (``foldexp/conf/dataset/``): one per dataset builder.

Every default lives here, once; ``conf/dataset/<name>.yaml`` names its schema and holds
``_target_`` and what differs (ESOL and FreeSolv are presets of ``molecules_csv``, SST of
the SST builder, addition and multiplication of ``marked_sequences``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from omegaconf import MISSING

from foldexp.config.fields import (
    MAX_CLASSES,
    MAX_EXAMPLES,
    MAX_GENERATED,
    MAX_SEQUENCE_LENGTH,
    WORD_VECTORS_SOURCE,
    a_path,
    count,
    existing_file,
    ranged,
    rng_seed,
)
from foldexp.data.molecule_csv import MAX_ATOMS, MAX_SMILES_CHARS

__all__ = [
    "CALCULATOR_MAX_DEPTH",
    "CalculatorDataConfig",
    "MarkedProblem",
    "MarkedSequencesDataConfig",
    "MoleculeDataConfig",
    "MoleculeFeatures",
    "MoleculeSplit",
    "MoleculeTask",
    "NodeLabels",
    "OnInvalid",
    "SSTDataConfig",
    "SSTSentencesDataConfig",
    "SSTView",
    "TextCSVDataConfig",
    "TextSplit",
    "Tokenizer",
    "TreeSplit",
    "TreesPTBDataConfig",
]


class SSTView(str, Enum):
    fine = "fine"
    binary = "binary"


class NodeLabels(str, Enum):
    all = "all"
    root = "root"


class MoleculeTask(str, Enum):
    auto = "auto"  # classification when every label is 0 or 1, else regression (logged)
    regression = "regression"
    classification = "classification"


class OnInvalid(str, Enum):
    error = "error"
    skip = "skip"


class MoleculeSplit(str, Enum):
    random = "random"
    scaffold = "scaffold"
    column = "column"
    kfold = "kfold"  # fold dataset.fold of dataset.folds is test (foldexp.data.folds)
    scaffold_kfold = "scaffold_kfold"  # the same, whole scaffold groups a fold
    kmeans = "kmeans"  # whole k-means clusters of Morgan fingerprints (data/fingerprint_splits)
    kennard_stone = "kennard_stone"  # the Kennard–Stone order of the fingerprints, train first


class MoleculeFeatures(str, Enum):
    """``dataset.features``: molecule-level feature sets (``foldexp.data.mol_features``)."""

    rdkit2d = "rdkit2d"  # RDKit's 2D descriptors (Descriptors.descList: 217)
    morgan = "morgan"  # Morgan count fingerprint, radius 2, 2048 bits (chemprop's morgan_count)
    morgan_binary = "morgan_binary"  # the same bits as 0/1


class MarkedProblem(str, Enum):
    addition = "addition"
    multiplication = "multiplication"


class TreeSplit(str, Enum):
    files = "files"  # dataset.path is a folder with train/dev/test files
    random = "random"  # dataset.path is one file, split by dataset.fractions and dataset.seed


class TextSplit(str, Enum):
    random = "random"
    column = "column"


class Tokenizer(str, Enum):
    whitespace = "whitespace"
    chars = "chars"


#: The deepest calculator tree (``foldexp.data.calculator``'s own limit, which a test holds equal):
#: generation is recursive, and deeper trees would also have absurd values.
CALCULATOR_MAX_DEPTH = 200


@dataclass
class CalculatorDataConfig:
    # builder returning train/dev/test and model sizes
    _target_: str = "foldexp.experiments.datasets.calculator"
    name: str = "calculator"  # shown in results
    # distinct expressions in all, split 80/10/10 (each takes ~1 KB and 60 µs to generate)
    n: int = ranged(3000, ge=3, le=MAX_GENERATED)
    # deepest operator nesting (edges from root to leaf); generation recurses, and values grow
    # with depth (foldexp.data.calculator's limit)
    max_depth: int = ranged(3, ge=1, le=CALCULATOR_MAX_DEPTH)
    n_classes: int = ranged(10, ge=2, le=MAX_CLASSES)  # label = value mod n_classes, on every node
    # chance that a non-root node above max_depth is a digit
    leaf_prob: float = ranged(0.3, ge=0, le=1)
    seed: int = rng_seed(0)  # generation seed (independent of the training seed)


@dataclass
class SSTDataConfig:
    _target_: str = (
        "foldexp.experiments.datasets.sst"  # builder returning train/dev/test and model sizes
    )
    name: str = "sst"  # shown in results
    data_dir: str = a_path("${paths.data_dir}")  # folder holding sst/train.txt, dev.txt, test.txt
    view: SSTView = SSTView.fine  # fine (5 classes) | binary (neutral roots dropped)
    labels: NodeLabels = NodeLabels.all  # all (loss on every node) | root (sentence label only)
    lowercase: bool = False  # lower-case words for the vocabulary and lookups
    # words rarer than this in train map to the unknown token
    min_count: int = count(1, MAX_EXAMPLES)
    # GloVe text file (.txt or .gz) to initialise embeddings, or null
    word_vectors: str | None = existing_file(source=WORD_VECTORS_SOURCE)
    # with word_vectors: dev/test words that have a vector get their own row
    vector_vocab: bool = False
    # binary view: neutral phrases train a third class, never predicted (Tai et al.);
    # fine view: no effect
    neutral_nodes: bool = False
    # use only the first N trees of each split (0 = all); for quick runs
    limit: int = count(0, MAX_EXAMPLES, 0)


@dataclass
class SSTSentencesDataConfig:
    # builder returning train/dev/test and model sizes
    _target_: str = "foldexp.experiments.datasets.sst_sentences"
    name: str = "sst_sentences"  # shown in results
    data_dir: str = a_path("${paths.data_dir}")  # folder holding sst/train.txt, dev.txt, test.txt
    view: SSTView = SSTView.fine  # fine (5 classes) | binary (neutral-root sentences dropped)
    lowercase: bool = False  # lower-case words for the vocabulary and lookups
    # words rarer than this in train map to the unknown token
    min_count: int = count(1, MAX_EXAMPLES)
    # GloVe text file (.txt or .gz) to initialise embeddings, or null
    word_vectors: str | None = existing_file(source=WORD_VECTORS_SOURCE)
    # use only the first N sentences of each split (0 = all); for quick runs
    limit: int = count(0, MAX_EXAMPLES, 0)


@dataclass
class MoleculeDataConfig:
    """``molecules_csv``: any molecule CSV (ESOL and FreeSolv are presets of it)."""

    # builder: read, featurise (RDKit, cached), split
    _target_: str = "foldexp.experiments.molecule_data.molecules_csv"
    name: str = "molecules_csv"  # shown in results
    path: str = a_path(MISSING)  # the CSV or CSV.gz file (comma, tab or semicolon separated; UTF-8)
    # the column holding SMILES, or [C1, C2] (up to 4): several molecules a row (solute,
    # solvent), each encoded, the readouts joined (model=dmpnn; foldexp.config.molecule_columns)
    smiles_column: Any = "smiles"
    # [T1, T2, ...]: one column per target; empty, nan or NA = missing; unset: the numeric
    # columns but SMILES, split and ID-like ones (experiments/molecule_targets.py), logged
    targets: list[str] = MISSING
    # auto (classification when every label is 0 or 1, else regression; the choice is logged) |
    # regression (RMSE, MAE) | classification (0/1 labels; ROC AUC, PRC AUC)
    task: MoleculeTask = MoleculeTask.auto
    # error | skip: a SMILES RDKit cannot read stops the run, or is left out with a warning
    on_invalid: OnInvalid = OnInvalid.error
    # random (seeded) | scaffold (Bemis-Murcko groups; seed unused) | column | kfold (seeded) |
    # scaffold_kfold (scaffold groups): fold `fold` of `folds` is test, dev from the others |
    # kmeans (seeded; whole clusters a part) | kennard_stone (deterministic; Jaccard distance)
    split: MoleculeSplit = MoleculeSplit.random
    folds: int = ranged(5, ge=2, le=100)  # split=kfold|scaffold_kfold: the number of folds
    # split=kfold|scaffold_kfold: the test fold, 0..folds-1 (-m dataset.fold=0,1,2,3,4 runs all)
    fold: int = ranged(0, ge=0, le=99)
    # split=kmeans: the number of clusters (0: molecules // 10 + 1, astartes's default)
    clusters: int = count(0, MAX_EXAMPLES, 0)
    # split=column: the column saying train, valid (or dev) or test on each row
    split_column: str | None = None
    # train / dev / test shares (split=column with train/test only: dev's share of train)
    fractions: list[float] = ranged([0.8, 0.1, 0.1], ge=0, le=1)
    seed: int = rng_seed(0)  # split seed (the YAML passes the run seed: sweeps vary the split)
    # use only the first N molecules (0 = all); for quick runs
    limit: int = count(0, MAX_EXAMPLES, 0)
    # featurisation cache (null = featurise on every run)
    cache_dir: str | None = a_path("${paths.cache_dir}")
    # classification: weight each task's positives by its negatives / positives on train
    balance: bool = False
    # a molecule of more atoms, or a SMILES of more characters, is an invalid row (on_invalid;
    # predict: that row's error). 1,000 atoms: 56 MB of pair features, more than any drug,
    # natural product or peptide such as insulin (~400); foldexp.data.molecule_csv says why
    max_atoms: int = ranged(MAX_ATOMS, ge=1, le=4096)
    max_smiles_chars: int = ranged(MAX_SMILES_CHARS, ge=1, le=1_000_000)
    # [U1, U2, ...]: each target's units (log(mol/L), kcal/mol), on the RMSE and MAE axes and in
    # results.md (null: not known)
    units: list[str] | None = None
    # [rdkit2d, morgan, morgan_binary]: molecule-level features joined to the readout, each
    # standardised with the train split's mean and std (docs/MOLECULES.md); [] = none
    features: list[MoleculeFeatures] = field(default_factory=list)
    # [C1, C2, ...]: the CSV's own numeric columns as features too (predict's input needs them)
    feature_columns: list[str] = field(default_factory=list)
    # standardised features are clipped to ±feature_clip: a molecule far outside the training
    # range (Kappa3 of isopropanol: 350 std) stays within it; null = not clipped
    feature_clip: float | None = ranged(10.0, gt=0, le=1e6, none_ok=True)


@dataclass
class MarkedSequencesDataConfig:
    _target_: str = (
        "foldexp.experiments.datasets.marked_sequences"  # builder generating the three splits
    )
    name: str = "addition"  # shown in results
    problem: MarkedProblem = MarkedProblem.addition  # addition | multiplication
    n_train: int = ranged(10000, gt=0, le=MAX_GENERATED)  # training sequences
    n_dev: int = ranged(1000, gt=0, le=MAX_GENERATED)  # dev sequences (model selection)
    n_test: int = ranged(1000, gt=0, le=MAX_GENERATED)  # test sequences
    min_len: int = ranged(50, ge=2, le=MAX_SEQUENCE_LENGTH)  # two marked values at least
    # longest (lengths uniform in [min_len, max_len]; the paper goes to 1000)
    max_len: int = ranged(100, ge=2, le=MAX_SEQUENCE_LENGTH)
    seed: int = rng_seed(0)  # generation seed (independent of the training seed)


@dataclass
class TreesPTBDataConfig:
    """``trees_ptb``: PTB-format trees with integer labels (``foldexp.experiments.tree_data``)."""

    # builder returning train/dev/test and model sizes
    _target_: str = "foldexp.experiments.tree_data.trees_ptb"
    name: str = "trees_ptb"  # shown in results
    path: str = a_path(MISSING)  # a folder holding the three files, or one tree file (split=random)
    # split=files: the files' names inside path (or absolute paths)
    train_file: str = a_path("train.txt")
    dev_file: str = a_path("dev.txt")
    test_file: str = a_path("test.txt")
    # files (path is a folder) | random (path is one file, cut by fractions)
    split: TreeSplit = TreeSplit.files
    # split=random: train / dev / test shares
    fractions: list[float] = ranged([0.8, 0.1, 0.1], ge=0, le=1)
    seed: int = rng_seed(0)  # split=random: the split's seed (the YAML passes the run seed)
    # classes 0..K-1 (null: the largest training label + 1)
    num_classes: int | None = ranged(None, ge=2, le=MAX_CLASSES, none_ok=True)
    # [class of file label 0, of label 1, ...]; -1 = no label (e.g. SST binary: [0,0,-1,1,1])
    label_map: list[int] | None = ranged(None, ge=-1, lt=MAX_CLASSES, none_ok=True)
    # drop trees whose root has no label, or one of a class never predicted
    drop_unscored_roots: bool = False
    # predict and score only the first N classes; the rest train only (null: all)
    predict_classes: int | None = ranged(None, ge=2, le=MAX_CLASSES, none_ok=True)
    # [[negative classes], [positive classes]]: adds binary_accuracy (e.g. [[0,1],[3,4]])
    polarity: list[list[int]] | None = ranged(None, ge=0, lt=MAX_CLASSES, none_ok=True)
    class_names: list[str] | None = None  # one name per class, for predictions (null: 0, 1, ...)
    # all (loss on every labelled node) | root (the root's label only)
    labels: NodeLabels = NodeLabels.all
    # merge each node of one child into it, keeping the upper label (the binary model needs
    # 0 or 2 children)
    collapse_unary: bool = False
    lowercase: bool = False  # lower-case words for the vocabulary and lookups
    # words rarer than this in train map to the unknown token
    min_count: int = count(1, MAX_EXAMPLES)
    # GloVe text file (.txt or .gz) to initialise embeddings, or null
    word_vectors: str | None = existing_file(source=WORD_VECTORS_SOURCE)
    # with word_vectors: dev/test words that have a vector get their own row
    vector_vocab: bool = False
    # use only the first N trees of each split (0 = all); for quick runs
    limit: int = count(0, MAX_EXAMPLES, 0)


@dataclass
class TextCSVDataConfig:
    """``text_csv``: sentence classification from a CSV (``foldexp.experiments.text_data``)."""

    # builder returning train/dev/test and model sizes
    _target_: str = "foldexp.experiments.text_data.text_csv"
    name: str = "text_csv"  # shown in results
    path: str = a_path(MISSING)  # the CSV or CSV.gz file (UTF-8, a header row)
    text_column: str = "text"  # the column holding each sentence
    label_column: str = "label"  # its class: integers 0..K-1, or names (class ids in sorted order)
    tokenizer: Tokenizer = Tokenizer.whitespace  # whitespace (words) | chars (characters)
    lowercase: bool = False  # lower-case the texts
    # words rarer than this in train map to the unknown token
    min_count: int = count(1, MAX_EXAMPLES)
    # GloVe text file (.txt or .gz) to initialise embeddings, or null
    word_vectors: str | None = existing_file(source=WORD_VECTORS_SOURCE)
    # random (fractions, seed) | column (split_column says train / valid|dev / test)
    split: TextSplit = TextSplit.random
    split_column: str = "split"  # split=column: train / valid or dev / test per row
    # split=random: train / dev / test shares
    fractions: list[float] = ranged([0.8, 0.1, 0.1], ge=0, le=1)
    seed: int = rng_seed(0)  # split=random: the split's seed (the YAML passes the run seed)
    # error | skip: a row with an empty text or a missing label (skip warns, naming the first rows)
    on_invalid: OnInvalid = OnInvalid.error
    # use only the first N examples of each split (0 = all); for quick runs
    limit: int = count(0, MAX_EXAMPLES, 0)
