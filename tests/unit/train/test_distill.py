"""Knowledge distillation (``model.teacher``): each training node's soft target is the teachers'
mean probability there, which equals each teacher's prediction for that subtree on its own; the
student's loss mixes it with the gold labels; a distilled run is reproducible and resumes
exactly; bad teachers are refused before training."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from foldexp.data.sst import load_sst
from foldexp.data.vocab import Vocabulary
from foldexp.experiments.datasets import sst
from foldexp.models.distill import teacher_targets
from foldexp.models.tree_lstm import TreeLSTMClassifier
from foldexp.train.app import compose_config
from foldexp.train.checkpoint import seed_everything
from foldexp.train.loop import run_train
from foldexp.train.runs import RunSetup, find_runs, load_run_model, prepare_for_training


@pytest.fixture
def teachers(sst_overrides, tmp_path: Path) -> Path:
    for seed in (1, 2):
        run_train(compose_config(sst_overrides(f"seed={seed}"), tmp_path / "teachers" / str(seed)))
    return tmp_path / "teachers"


def test_targets_are_the_teachers_mean_prediction_for_each_subtree(
    teachers: Path, sst_data_dir: Path
) -> None:
    trees = sst(str(sst_data_dir), view="fine", neutral_nodes=True).train
    targets = teacher_targets([teachers], RunSetup(trees, 256))

    nodes = {node for tree in trees for node in tree.nodes()}
    assert set(targets) == nodes
    models = []
    for run, config in find_runs([teachers]):
        bundle = sst(**{k: v for k, v in config["dataset"].items() if k not in ("_target_",)})
        models.append(load_run_model(run, config, bundle))
    for node in nodes:  # a node's prediction is its subtree's, taken as a tree of its own
        with torch.no_grad():
            alone = [m.root_probabilities(m.collate([node]))[0] for m in models]
        np.testing.assert_allclose(targets[node], torch.stack(alone).mean(0), atol=1e-6)


def test_the_training_hook_leaves_the_rng_where_it_was(teachers: Path, sst_data_dir: Path) -> None:
    trees = sst(str(sst_data_dir), view="fine", neutral_nodes=True).train
    model = TreeLSTMClassifier(Vocabulary.from_trees(trees), 5, 4, 4, teacher=[str(teachers)])
    seed_everything(5)
    prepare_for_training(model, RunSetup(trees, 256))  # builds the teachers: draws from the RNG
    after = torch.rand(3)
    seed_everything(5)
    assert torch.equal(torch.rand(3), after)  # the caller's RNG is left where it was
    assert len(model._soft_targets) == len({node for tree in trees for node in tree.nodes()})


def test_student_loss_mixes_soft_and_gold_targets(sst_data_dir: Path) -> None:
    trees = load_sst("train", sst_data_dir)
    torch.manual_seed(0)
    model = TreeLSTMClassifier(
        Vocabulary.from_trees(trees), 5, 4, 4, teacher=["unused"], distill_weight=0.25
    )
    with torch.no_grad():  # every node gets the same logits
        model.classify.weight.zero_()
        model.classify.bias.copy_(torch.tensor([0.5, -1.0, 0.0, 2.0, 1.0]))
    soft = np.array([0.1, 0.2, 0.3, 0.2, 0.2], dtype=np.float32)
    model.set_soft_targets({node: soft for tree in trees for node in tree.nodes()})
    nodes = torch.tensor([label for t in trees for label in t.labels()])
    log_p = model.classify.bias.detach().log_softmax(0).expand(len(nodes), 5)
    gold = F.nll_loss(log_p, nodes, reduction="sum")
    soft_ce = -(torch.from_numpy(soft) * log_p).sum()
    expected = (0.75 * gold + 0.25 * soft_ce) / len(trees)
    torch.testing.assert_close(model(model.collate(trees))["loss"], expected)
    # Evaluation reports the gold cross-entropy alone.
    torch.testing.assert_close(model.eval()(model.collate(trees))["loss"], gold / len(trees))


def test_distilled_run_resumes_exactly(
    teachers: Path, sst_overrides, resume_matches_uninterrupted
) -> None:
    results = resume_matches_uninterrupted(
        sst_overrides(f"model.teacher=[{teachers}]", "model.distill_weight=0.5")
    )
    assert 0.0 <= results["test_accuracy"] <= 1.0


def test_bad_teachers_are_refused(teachers: Path, sst_overrides, tmp_path: Path) -> None:
    missing = compose_config(sst_overrides(f"model.teacher=[{tmp_path / 'nowhere'}]"), tmp_path)
    with pytest.raises(FileNotFoundError, match="model.teacher: .*nowhere does not exist"):
        run_train(missing)
    with pytest.raises(ValueError, match=r"model.distill_weight=1.5; expected 0 <= value <= 1"):
        compose_config(sst_overrides("model.distill_weight=1.5"), tmp_path)
    other = sst_overrides(f"model.teacher=[{teachers}]", "dataset.view=binary")
    with pytest.raises(ValueError, match="trained on other trees than this run"):
        run_train(compose_config(other, tmp_path / "binary"))


def test_distill_preset_needs_its_teachers(sst_overrides, tmp_path: Path, compose_or_skip) -> None:
    preset = compose_or_skip(["experiment=sst_treelstm_fold_distill"], tmp_path)
    assert list(preset.model.teacher) == []  # the preset leaves its teachers to the user
    cfg = compose_config(sst_overrides("model.teacher=[]"), tmp_path)
    with pytest.raises(ValueError, match=r"model.teacher=\[\] names no teacher"):
        run_train(cfg)
