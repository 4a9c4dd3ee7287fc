"""``model=dmpnn``: chemprop's directed message passing. Its bonds are RDKit's, its steps are
the paper's equations (checked against a loop over bonds written from them), a batch gives each
molecule what it gives alone (values and gradients), and it trains on ``molecules_csv`` for
regression and multi-task classification, then predicts from its run folder."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from foldexp.analysis.predict import run_predict
from foldexp.config.errors import ConfigError
from foldexp.data import featurize
from foldexp.data.molecule_graphs import MoleculeGraph
from foldexp.models.dmpnn import BOND_TYPE_COLUMNS, DMPNNModel, directed_bonds
from foldexp.train.app import compose_config
from foldexp.train.loop import run_train

SMILES = ["CCO", "c1ccccc1O", "CC(=O)Nc1ccc(O)cc1", "[Na+].[Cl-]", "C", "ClC(Cl)Cl", "C#N"]


def _molecule(smiles: str, targets: tuple[float, ...] = (0.0,)) -> MoleculeGraph:
    atoms, pairs = featurize.featurize_mol(featurize.parse_smiles(smiles))
    values = np.array(targets, dtype=np.float32)
    return MoleculeGraph(smiles, atoms, pairs, values, np.ones(len(values), dtype=bool))


def test_the_bond_columns_are_the_featuriser_bond_types() -> None:
    names = featurize.PAIR_FEATURE_NAMES
    assert names[BOND_TYPE_COLUMNS] == tuple(
        f"bond={t}" for t in ("single", "double", "triple", "aromatic", "other")
    )
    assert names[0] == "bond=none"


@pytest.mark.parametrize("smiles", SMILES)
def test_directed_bonds_are_rdkits_bonds_both_ways(smiles: str) -> None:
    mol = featurize.parse_smiles(smiles)
    _, pairs = featurize.featurize_mol(mol)
    source, target, reverse = directed_bonds(pairs)
    bonds = {(b.GetBeginAtomIdx(), b.GetEndAtomIdx()) for b in mol.GetBonds()}
    assert {(int(s), int(t)) for s, t in zip(source, target)} == bonds | {(t, s) for s, t in bonds}
    assert len(source) == 2 * len(bonds)
    assert (source[reverse] == target).all() and (target[reverse] == source).all()


def _by_the_equations(model: DMPNNModel, mol: MoleculeGraph) -> torch.Tensor:
    """The D-MPNN of one molecule written from the paper's equations, one bond at a time."""
    x = torch.as_tensor(mol.atom_features).double()
    e = torch.as_tensor(mol.pair_features).double()
    source, target, _ = directed_bonds(mol.pair_features)
    edges = [(int(v), int(w)) for v, w in zip(source, target)]
    h0 = {(v, w): torch.relu(model.w_i(torch.cat([x[v], e[v, w]]))) for v, w in edges}
    h = dict(h0)
    for _ in range(model.depth - 1):
        zero = torch.zeros_like(next(iter(h0.values()))) if h0 else None
        m = {
            (v, w): sum((h[(k, u)] for k, u in edges if u == v and k != w), zero) for v, w in edges
        }
        h = {vw: torch.relu(h0[vw] + model.w_h(m[vw])) for vw in edges}
    states = []
    for v in range(len(x)):
        incoming = [h[(k, u)] for k, u in edges if u == v]
        total = sum(incoming, torch.zeros(model.w_h.in_features, dtype=torch.float64))
        states.append(torch.relu(model.w_o(torch.cat([x[v], total]))))
    return model.ffn(torch.stack(states).sum(0))


def _model(**keys: object) -> DMPNNModel:
    torch.manual_seed(0)
    return DMPNNModel(featurize.ATOM_FEATURES, featurize.PAIR_FEATURES, **keys).double()


def test_a_batch_follows_the_equations_and_gives_each_molecule_what_it_gives_alone() -> None:
    model = _model(num_targets=2, hidden_size=16, depth=3).eval()
    mols = [_molecule(s, (0.5, 1.0)) for s in SMILES]  # float64 model: rounding is not at stake
    batched = model.predict(model.collate(mols))
    alone = torch.cat([model.predict(model.collate([m])) for m in mols])
    torch.testing.assert_close(batched, alone, rtol=1e-10, atol=1e-10)
    with torch.no_grad():
        written = torch.stack([_by_the_equations(model, m) for m in mols[:3]])
    torch.testing.assert_close(model._outputs(model.collate(mols[:3])), written)
    # gradients: the batch's loss terms are the molecules' own
    model.zero_grad()
    model._outputs(model.collate(mols)).sum().backward()
    together = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    for m in mols:
        model._outputs(model.collate([m])).sum().backward()
    for a, b in zip(together, (p.grad for p in model.parameters())):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)


def test_the_reverse_bond_is_left_out_of_a_bonds_message() -> None:
    """Ethanol, depth 2: the message on C0→C1 is the sum of the bonds into C0 but C1→C0,
    which is none (C0 has no other neighbour), so h(C0→C1) stays h⁰(C0→C1)."""
    model = _model(hidden_size=8, depth=2)
    mol = _molecule("CCO")
    graph = model.collate([mol])
    source, target = graph.source.tolist(), graph.target.tolist()
    k = next(i for i, (s, t) in enumerate(zip(source, target)) if (s, t) == (0, 1))
    start = torch.relu(model.w_i(graph.bonds.double()))
    into = torch.zeros(3, 8, dtype=torch.float64).index_add(0, graph.target, start)
    message = into[graph.source] - start[graph.reverse]
    assert torch.equal(message[k], torch.zeros(8, dtype=torch.float64))


def _csv(tmp_path: Path) -> Path:
    smiles = ["CCO", "CCCC", "c1ccccc1", "CC(=O)O", "CCN", "OCCO", "c1ccncc1", "CC(C)O",
              "ClCCl", "CCOCC", "C1CCCCC1", "CC#N", "CCCl", "Cc1ccccc1", "NCCO",
              "C=CC"] * 2  # fmt: skip
    lines = ["smiles,logp,ring,oxygen"]
    for k, s in enumerate(smiles):
        ring = int(any(c.isdigit() for c in s))
        lines.append(f"{s},{0.1 * k - 1:.2f},{ring},{'' if k % 4 == 0 else int('O' in s)}")
    path = tmp_path / "mols.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(
    "targets, metric", [("[logp]", "rmse"), ("[ring,oxygen]", "roc_auc")]
)  # fmt: skip
def test_dmpnn_trains_on_molecules_csv_and_predicts(
    targets: str, metric: str, tmp_path: Path
) -> None:
    path = _csv(tmp_path)
    args = ["experiment=molecules_csv", "model=dmpnn", f"dataset.path={path}",
            f"dataset.targets={targets}", f"paths.cache_dir={tmp_path / 'cache'}",
            "dataset.fractions=[0.5,0.25,0.25]", "model.hidden_size=16", "trainer.epochs=2",
            "trainer.batch_size=8", "trainer.progress=false", "trainer.plots=false"]  # fmt: skip
    results = run_train(compose_config(args, tmp_path / "run"))
    assert results["select_metric"] == f"dev_{metric}" and np.isfinite(results[f"test_{metric}"])
    assert results["config"]["model"]["_target_"] == "foldexp.models.dmpnn.DMPNNModel"
    info = json.loads((tmp_path / "run" / "run_info.json").read_text())["info"]
    rows = run_predict(tmp_path / "run", str(path), tmp_path / "pred.csv")
    column = "logp" if metric == "rmse" else "ring_probability"
    assert len(rows) == 32 and all(r["error"] == "" and r[column] != "" for r in rows)
    assert info["task"] == ("regression" if metric == "rmse" else "classification")


def test_dmpnn_keys_have_ranges_and_read_molecules_only(tmp_path: Path) -> None:
    cfg = compose_config(["experiment=esol_weave", "model=dmpnn"], tmp_path)
    assert (cfg.model.hidden_size, cfg.model.depth, cfg.model.ffn_layers) == (300, 3, 2)
    with pytest.raises(ConfigError, match=r"model.depth=0"):
        compose_config(["experiment=esol_weave", "model=dmpnn", "model.depth=0"], tmp_path)
    with pytest.raises(ConfigError, match=r"model dmpnn .* reads molecules"):
        compose_config(["model=dmpnn"], tmp_path)
