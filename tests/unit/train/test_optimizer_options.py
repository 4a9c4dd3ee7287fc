"""Each optimizer's own keys (SGD's momentum, Adam's betas, Adagrad's eps, ...): set from the
command line, checked at compose time, passed to torch, saved and resumed."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hydra.utils import instantiate

from foldexp.config.checks import check_run_config
from foldexp.config.errors import ConfigError
from foldexp.config.settings import plain_config as run_config
from foldexp.train.app import compose_config
from foldexp.train.resume_config import config_changes

# Every key of each optimizer's own schema, at a value other than its default.
_OWN_KEYS = {
    "sgd": {"momentum": 0.8, "dampening": 0.25, "nesterov": False},
    "adam": {"betas": [0.5, 0.75], "eps": 0.001, "amsgrad": True},
    "adamw": {"betas": [0.5, 0.75], "eps": 0.001, "amsgrad": True},
    "adagrad": {"lr_decay": 0.01, "eps": 0.001, "initial_accumulator_value": 0.5},
}


def _override(key: str, value: object) -> str:
    text = str(value).lower() if isinstance(value, bool) else str(value).replace(" ", "")
    return f"optimizer.{key}={text}"


@pytest.mark.parametrize("name", sorted(_OWN_KEYS))
def test_every_own_key_reaches_the_torch_optimizer(name: str, tmp_path: Path) -> None:
    keys = _OWN_KEYS[name]
    cfg = compose_config(
        [f"optimizer={name}", *(_override(k, v) for k, v in keys.items())], tmp_path
    )
    optimizer = instantiate(cfg.optimizer, _convert_="all")([torch.nn.Parameter(torch.ones(2))])
    group = optimizer.param_groups[0]
    for key, value in keys.items():
        assert list(group[key]) == value if isinstance(value, list) else group[key] == value, key
    assert type(group.get("betas", ())) in (tuple, list)  # not a ListConfig: weights-only saves


def test_sgd_with_nesterov_momentum_trains_and_resumes(resume_matches_uninterrupted, tiny) -> None:
    resume_matches_uninterrupted(
        [*tiny, "optimizer=sgd", "optimizer.momentum=0.9", "optimizer.nesterov=true"]
    )


def test_adam_betas_survive_a_weights_only_checkpoint(resume_matches_uninterrupted, tiny) -> None:
    resume_matches_uninterrupted([*tiny, "optimizer.betas=[0.8,0.99]", "optimizer.amsgrad=true"])


def _refused(overrides: list[str], tmp_path: Path) -> str:
    with pytest.raises(ConfigError) as err:
        compose_config(overrides, tmp_path)
    return str(err.value)


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (["optimizer.betas=[0.9]"], "optimizer.betas=[0.9]; expected a list of 2 numbers, each"),
        (["optimizer.betas=[0.9,1.0]"], "optimizer.betas=[0.9, 1.0]; expected 0 <= value < 1"),
        (["optimizer.betas=[0.9,nan]"], "optimizer.betas=[0.9, nan]; expected 0 <= value < 1"),
        (["optimizer.eps=0"], "optimizer.eps=0.0; expected 1.1754943508222875e-38 <= value < 10"),
        (["optimizer.eps=1e-50"], "optimizer.eps=1e-50; expected 1.1754943508222875e-38 <= "),
        (["optimizer.betas=[[0.9],[0.99]]"], "optimizer.betas=[[0.9], [0.99]]; expected a list"),
        (
            ["optimizer=sgd", "optimizer.momentum=${optimizer.weight_decay}",
             "optimizer.nesterov=true"],
            "optimizer.nesterov=true with optimizer.momentum=0.0 and optimizer.dampening=0.0",
        ),
        (["optimizer=adagrad", "optimizer.eps=1e8"], "optimizer.eps=100000000.0; expected 1.1"),
        (["optimizer=adagrad", "optimizer.lr_decay=-1"], "optimizer.lr_decay=-1.0; expected a"),
        (["optimizer=sgd", "optimizer.momentum=1"], "optimizer.momentum=1.0; expected 0 <= value"),
        (["optimizer=sgd", "optimizer.nesterov=true"], "optimizer.nesterov=true with optimizer."),
        (
            ["optimizer=sgd", "optimizer.momentum=0.9", "optimizer.dampening=0.1",
             "optimizer.nesterov=true"],
            "Nesterov momentum needs a momentum > 0 and dampening 0",
        ),
        (
            ["optimizer._target_=torch.optim.SGD"],
            "optimizer.amsgrad is not a key of torch.optim.SGD (SGDConfig)",
        ),
    ],
)  # fmt: skip
def test_bad_values_fail_at_compose_time_naming_key_and_range(
    overrides: list[str], expected: str, tmp_path: Path
) -> None:
    assert expected in _refused(overrides, tmp_path)


def test_a_key_of_another_optimizer_names_the_groups_that_take_it(tmp_path: Path) -> None:
    message = _refused(["optimizer._target_=torch.optim.SGD"], tmp_path)
    assert (
        "; amsgrad is a key of optimizer=adam, adamw; choose an optimizer by its group" in message
    )
    message = _refused(["optimizer=adagrad", "+optimizer.momentum=0.9"], tmp_path)
    assert "optimizer.momentum is not a key of torch.optim.Adagrad (AdagradConfig)" in message
    assert "momentum is a key of optimizer=sgd" in message
    with pytest.raises(Exception, match="momentum"):  # not a key of Adam's schema at all
        compose_config(["optimizer=adam", "optimizer.momentum=0.9"], tmp_path)


def test_a_run_folder_config_is_checked_against_its_optimizer(tmp_path: Path) -> None:
    config = {
        "model": {"_target_": "foldexp.models.tree_lstm.TreeLSTMClassifier"},
        "optimizer": {"_target_": "torch.optim.SGD", "lr": 0.1, "betas": [0.9, 0.99]},
    }
    with pytest.raises(ConfigError, match="run.json: optimizer.betas is not a key of torch"):
        check_run_config(config, "run.json")
    config["optimizer"] = {"_target_": "torch.optim.SGD", "lr": 0.1}  # before these keys existed
    check_run_config(config, "run.json")


def test_nesterov_reads_interpolated_values_resolved(tmp_path: Path) -> None:
    overrides = ["optimizer=sgd", "optimizer.momentum=0.9", "optimizer.nesterov=true"]
    cfg = compose_config([*overrides, "optimizer.dampening=${optimizer.weight_decay}"], tmp_path)
    assert cfg.optimizer.dampening == 0.0


@pytest.mark.parametrize("flag", ["amsgrad", "fused"])
def test_a_run_folder_boolean_must_be_a_boolean(flag: str) -> None:
    config = {
        "model": {"_target_": "foldexp.models.tree_lstm.TreeLSTMClassifier"},
        "optimizer": {"_target_": "torch.optim.Adam", "lr": 0.1, flag: "yes please"},
    }
    with pytest.raises(ConfigError, match=f"optimizer.{flag}='yes please'; expected true or false"):
        check_run_config(config, "run.json")


def test_resuming_an_older_run_compares_keys_it_lacks_with_their_defaults(tmp_path: Path) -> None:
    """A run written before these keys existed had their defaults: resuming it with other
    values would record them while torch kept the checkpoint's (its state dict wins)."""
    older = run_config(compose_config([], tmp_path))
    for key in ("betas", "eps", "amsgrad"):
        del older["optimizer"][key]
    same = run_config(compose_config([], tmp_path))
    assert config_changes(older, same) == []
    other = run_config(compose_config(["optimizer.betas=[0.5,0.5]"], tmp_path))
    assert config_changes(older, other) == [("optimizer.betas", [0.9, 0.999], [0.5, 0.5])]
