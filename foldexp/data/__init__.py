"""Datasets and data structures for foldexp: trees, sentences, sequences and molecules.

This is a leaf layer: it imports nothing else from foldexp, and models convert its structures
(:class:`Tree`, :class:`MoleculeGraph`, plain numpy arrays) into block inputs.

Modules:

* :mod:`~foldexp.data.textfile` -- every user's text file read one way (gzip, UTF-8);
* :mod:`~foldexp.data.trees` -- the immutable :class:`Tree`;
* :mod:`~foldexp.data.ptb`, :mod:`~foldexp.data.sst` -- PTB tree parser, Stanford Sentiment
  Treebank and its label views; :mod:`~foldexp.data.vocab` -- :class:`Vocabulary`;
* :mod:`~foldexp.data.wordvec` -- GloVe vectors aligned to a vocabulary;
* :mod:`~foldexp.data.calculator`, :mod:`~foldexp.data.synthetic`,
  :mod:`~foldexp.data.sequences` -- generated datasets and random shapes;
* :mod:`~foldexp.data.featurize`, :mod:`~foldexp.data.molecules` -- SMILES -> graphs (RDKit);
* :mod:`~foldexp.data.splits` -- random and scaffold splits;
* :mod:`~foldexp.data.fetch`, :mod:`~foldexp.data.commands`, :mod:`~foldexp.data.cli` --
  getting data onto disk and ``foldexp data ...``.

Molecule names are resolved lazily so that ``import foldexp.data`` does not load RDKit.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from foldexp.data.calculator import calculator_splits, evaluate, make_calculator_dataset
from foldexp.data.errors import (
    DataError,
    DatasetNotFoundError,
    DataWarning,
    FetchError,
    FormatError,
    MoleculeError,
    TextFileError,
    TreeParseError,
)

# The `fetch` function stays in foldexp.data.fetch: re-exporting it here would shadow the module.
from foldexp.data.fetch import import_dataset
from foldexp.data.paths import data_root
from foldexp.data.ptb import parse_tree, read_ptb_file
from foldexp.data.sequences import (
    SequenceExample,
    accuracy_within,
    addition_problem,
    multiplication_problem,
    pad_sequences,
    sst_sentences,
)
from foldexp.data.splits import random_split, scaffold_split, split_sizes, take
from foldexp.data.sst import load_sst, read_sst_file, root_only, to_binary
from foldexp.data.synthetic import (
    Graph,
    balanced_tree,
    chain_tree,
    random_binary_tree,
    random_graph,
    random_sequences,
    random_trees,
    same_shape_batch,
)
from foldexp.data.trees import NO_LABEL, Tree
from foldexp.data.vocab import Vocabulary
from foldexp.data.wordvec import AlignedVectors, align_word_vectors, read_word_vectors

if TYPE_CHECKING:
    from foldexp.data.featurize import ATOM_FEATURES, PAIR_FEATURES
    from foldexp.data.molecule_graphs import MoleculeDataset, MoleculeGraph
    from foldexp.data.molecules import (
        load_esol,
        load_freesolv,
        load_molecule_csv,
    )

_LAZY = {
    "ATOM_FEATURES": "foldexp.data.featurize",
    "PAIR_FEATURES": "foldexp.data.featurize",
    "MoleculeDataset": "foldexp.data.molecule_graphs",
    "MoleculeGraph": "foldexp.data.molecule_graphs",
    "load_esol": "foldexp.data.molecules",
    "load_freesolv": "foldexp.data.molecules",
    "load_molecule_csv": "foldexp.data.molecules",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'foldexp.data' has no attribute {name!r}")


__all__ = [
    "ATOM_FEATURES",
    "NO_LABEL",
    "PAIR_FEATURES",
    "AlignedVectors",
    "DataError",
    "DataWarning",
    "DatasetNotFoundError",
    "FetchError",
    "FormatError",
    "Graph",
    "MoleculeDataset",
    "MoleculeError",
    "MoleculeGraph",
    "SequenceExample",
    "TextFileError",
    "Tree",
    "TreeParseError",
    "Vocabulary",
    "accuracy_within",
    "addition_problem",
    "align_word_vectors",
    "balanced_tree",
    "calculator_splits",
    "chain_tree",
    "data_root",
    "evaluate",
    "import_dataset",
    "load_esol",
    "load_freesolv",
    "load_molecule_csv",
    "load_sst",
    "make_calculator_dataset",
    "multiplication_problem",
    "pad_sequences",
    "parse_tree",
    "random_binary_tree",
    "random_graph",
    "random_sequences",
    "random_split",
    "random_trees",
    "read_ptb_file",
    "read_sst_file",
    "read_word_vectors",
    "root_only",
    "same_shape_batch",
    "scaffold_split",
    "split_sizes",
    "sst_sentences",
    "take",
    "to_binary",
]
