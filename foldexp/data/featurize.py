"""Molecule graph features after Kearnes et al. 2016, "Molecular graph convolutions".

SMILES are parsed by RDKit (never by hand) into heavy-atom graphs. Each atom gets
:data:`ATOM_FEATURES` numbers and each ordered atom pair :data:`PAIR_FEATURES`; the names are in
:data:`ATOM_FEATURE_NAMES` and :data:`PAIR_FEATURE_NAMES`.

Atom features: element one-hot over :data:`ATOM_SYMBOLS` plus "other"; heavy-atom degree one-hot
0..5, 6+; total hydrogen count 0..3, 4+; formal charge (the integer); hybridisation one-hot sp,
sp2, sp3, sp3d, sp3d2, other; aromatic; in any ring; for each ring size 3..8 the number of
(SSSR) rings of that size containing the atom; hydrogen-bond donor and acceptor (RDKit's
``BaseFeatures.fdef`` pharmacophore definitions); CIP chirality R and S.

Pair features: bond type one-hot none, single, double, triple, aromatic, other; graph distance
one-hot 1..6, 7+ (all zero for atoms in disconnected fragments, e.g. salts); both atoms in a
common ring. The diagonal (an atom paired with itself) is all zero.

Bump :data:`FEATURIZER_VERSION` whenever a feature changes: it is part of the cache key.
"""

from __future__ import annotations

import functools
import os

import numpy as np
from rdkit import Chem, RDConfig, rdBase
from rdkit.Chem import ChemicalFeatures, rdchem

__all__ = [
    "read_smiles",
    "shown_smiles",
    "ATOM_FEATURES",
    "ATOM_FEATURE_NAMES",
    "ATOM_SYMBOLS",
    "FEATURIZER_VERSION",
    "PAIR_FEATURES",
    "PAIR_FEATURE_NAMES",
    "atom_features",
    "featurize_mol",
    "pair_features",
    "parse_smiles",
]

FEATURIZER_VERSION = "kearnes2016-v1"

#: Elements with their own one-hot slot; anything else sets the "other" slot.
ATOM_SYMBOLS = ("H", "B", "C", "N", "O", "F", "Si", "P", "S", "Cl", "Br", "I")
_HYBRIDS = (
    rdchem.HybridizationType.SP,
    rdchem.HybridizationType.SP2,
    rdchem.HybridizationType.SP3,
    rdchem.HybridizationType.SP3D,
    rdchem.HybridizationType.SP3D2,
)
_BONDS = (
    rdchem.BondType.SINGLE,
    rdchem.BondType.DOUBLE,
    rdchem.BondType.TRIPLE,
    rdchem.BondType.AROMATIC,
)
_RING_SIZES = range(3, 9)
_MAX_DISTANCE = 7  # distances >= 7 share the last bucket

ATOM_FEATURE_NAMES: tuple[str, ...] = (
    *(f"element={s}" for s in ATOM_SYMBOLS),
    "element=other",
    *(f"degree={d}" for d in range(6)),
    "degree>=6",
    *(f"num_h={h}" for h in range(4)),
    "num_h>=4",
    "formal_charge",
    "hybrid=sp",
    "hybrid=sp2",
    "hybrid=sp3",
    "hybrid=sp3d",
    "hybrid=sp3d2",
    "hybrid=other",
    "aromatic",
    "in_ring",
    *(f"rings_of_size_{k}" for k in _RING_SIZES),
    "hbond_donor",
    "hbond_acceptor",
    "chirality=R",
    "chirality=S",
)
PAIR_FEATURE_NAMES: tuple[str, ...] = (
    "bond=none",
    "bond=single",
    "bond=double",
    "bond=triple",
    "bond=aromatic",
    "bond=other",
    *(f"distance={d}" for d in range(1, _MAX_DISTANCE)),
    f"distance>={_MAX_DISTANCE}",
    "same_ring",
)
ATOM_FEATURES = len(ATOM_FEATURE_NAMES)
PAIR_FEATURES = len(PAIR_FEATURE_NAMES)

_A = {name: i for i, name in enumerate(ATOM_FEATURE_NAMES)}
_P = {name: i for i, name in enumerate(PAIR_FEATURE_NAMES)}
_ELEMENT = {s: _A[f"element={s}"] for s in ATOM_SYMBOLS}
_HYBRID = {h: _A["hybrid=sp"] + k for k, h in enumerate(_HYBRIDS)}
_BOND = {b: _P["bond=single"] + k for k, b in enumerate(_BONDS)}


def parse_smiles(smiles: str) -> Chem.Mol | None:
    """Parse and sanitise a SMILES string with RDKit; ``None`` if invalid or without atoms.

    RDKit's own log messages are silenced: callers report invalid rows themselves. A SMILES
    with whitespace inside is invalid: RDKit reads what follows a space as the molecule's name,
    so ``CCO c1ccccc1`` would silently be ethanol.
    """
    if any(ch.isspace() for ch in smiles.strip()):
        return None
    with rdBase.BlockLogs():
        mol = Chem.MolFromSmiles(smiles)
    if mol is None or mol.GetNumAtoms() == 0:
        return None
    return mol


@functools.lru_cache(maxsize=1)
def _feature_factory() -> ChemicalFeatures.MolChemicalFeatureFactory:
    fdef = os.path.join(RDConfig.RDDataDir, "BaseFeatures.fdef")
    return ChemicalFeatures.BuildFeatureFactory(fdef)


def atom_features(mol: Chem.Mol) -> np.ndarray:
    """Return the ``(n_atoms, ATOM_FEATURES)`` float32 atom feature matrix of ``mol``."""
    n = mol.GetNumAtoms()
    out = np.zeros((n, ATOM_FEATURES), dtype=np.float32)
    other_element = _A["element=other"]
    other_hybrid = _A["hybrid=other"]
    for atom in mol.GetAtoms():
        i = atom.GetIdx()
        out[i, _ELEMENT.get(atom.GetSymbol(), other_element)] = 1.0
        out[i, _A["degree=0"] + min(atom.GetDegree(), 6)] = 1.0
        out[i, _A["num_h=0"] + min(atom.GetTotalNumHs(), 4)] = 1.0
        out[i, _A["formal_charge"]] = atom.GetFormalCharge()
        out[i, _HYBRID.get(atom.GetHybridization(), other_hybrid)] = 1.0
        out[i, _A["aromatic"]] = atom.GetIsAromatic()
        out[i, _A["in_ring"]] = atom.IsInRing()
    for ring in mol.GetRingInfo().AtomRings():
        if len(ring) in _RING_SIZES:
            out[list(ring), _A[f"rings_of_size_{len(ring)}"]] += 1.0
    factory = _feature_factory()
    # includeOnly: computing all pharmacophore families would be ~20x slower.
    for family, column in (("Donor", _A["hbond_donor"]), ("Acceptor", _A["hbond_acceptor"])):
        for feature in factory.GetFeaturesForMol(mol, includeOnly=family):
            out[list(feature.GetAtomIds()), column] = 1.0
    for i, cip in Chem.FindMolChiralCenters(mol, useLegacyImplementation=False):
        if cip in ("R", "S"):
            out[i, _A[f"chirality={cip}"]] = 1.0
    return out


def pair_features(mol: Chem.Mol) -> np.ndarray:
    """Return the ``(n_atoms, n_atoms, PAIR_FEATURES)`` float32 pair feature tensor of ``mol``."""
    n = mol.GetNumAtoms()
    out = np.zeros((n, n, PAIR_FEATURES), dtype=np.float32)
    off_diagonal = ~np.eye(n, dtype=bool)
    bonded = np.zeros((n, n), dtype=bool)
    other_bond = _P["bond=other"]
    for bond in mol.GetBonds():
        i, j = bond.GetBeginAtomIdx(), bond.GetEndAtomIdx()
        k = _BOND.get(bond.GetBondType(), other_bond)
        out[i, j, k] = out[j, i, k] = 1.0
        bonded[i, j] = bonded[j, i] = True
    out[..., _P["bond=none"]] = off_diagonal & ~bonded
    distance = Chem.GetDistanceMatrix(mol)  # 1e8 between disconnected fragments
    connected = off_diagonal & (distance < n)
    bucket = np.minimum(distance, _MAX_DISTANCE).astype(np.int64) - 1
    rows, cols = np.nonzero(connected)
    out[rows, cols, _P["distance=1"] + bucket[rows, cols]] = 1.0
    same_ring = np.zeros((n, n), dtype=bool)
    for ring in mol.GetRingInfo().AtomRings():
        idx = np.asarray(ring)
        same_ring[np.ix_(idx, idx)] = True
    out[..., _P["same_ring"]] = same_ring & off_diagonal
    return out


def read_smiles(smiles: str, max_atoms: int, max_chars: int) -> tuple[Chem.Mol | None, str]:
    """``(mol, "")``, or ``(None, why)`` for a SMILES that is empty, invalid
    (``parse_smiles``) or past a size limit: more than ``max_chars`` characters
    (``dataset.max_smiles_chars``) or ``max_atoms`` atoms (``dataset.max_atoms``: the pair
    features take atoms² × PAIR_FEATURES floats). A long SMILES is shown by its start only."""
    smiles = smiles.strip()
    if not smiles:
        return None, "empty SMILES"
    if len(smiles) > max_chars:
        return None, (
            f"a SMILES of {len(smiles):,} characters, more than dataset.max_smiles_chars="
            f"{max_chars}"
        )
    mol = parse_smiles(smiles)
    if mol is None:
        why = (
            "a SMILES holds no spaces"
            if any(ch.isspace() for ch in smiles)
            else "RDKit cannot parse it"
        )
        return None, f"invalid SMILES {shown_smiles(smiles)} ({why})"
    if mol.GetNumAtoms() > max_atoms:
        return None, (
            f"a molecule of {mol.GetNumAtoms():,} atoms, more than dataset.max_atoms={max_atoms}"
        )
    return mol, ""


def shown_smiles(smiles: str, width: int = 60) -> str:
    """``smiles`` quoted for a message, cut after ``width`` characters (saying how long it is)."""
    if len(smiles) <= width:
        return repr(smiles)
    return f"{smiles[:width]!r}… ({len(smiles):,} characters)"


def featurize_mol(mol: Chem.Mol) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(atom_features(mol), pair_features(mol))``."""
    return atom_features(mol), pair_features(mol)
