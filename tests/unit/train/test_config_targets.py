"""``_target_`` keys are checked at compose time: an optimizer must be one foldexp registers (else
``foldexp eval`` refuses the run it wrote), a model must be a ``torch.nn.Module`` class."""

from __future__ import annotations

import pytest

from foldexp.config.errors import ConfigError
from foldexp.config.targets import TARGETS
from foldexp.train.app import compose_config


@pytest.mark.parametrize("target", ["torch.optim.RMSprop", "os.system"])
def test_an_unregistered_optimizer_fails_at_compose_time(target: str) -> None:
    with pytest.raises(ConfigError) as err:
        compose_config([f"optimizer._target_={target}"])
    message = str(err.value)
    assert message.startswith(f"optimizer._target_='{target}' is not one of foldexp's registered")
    assert "torch.optim.Adam, torch.optim.AdamW, torch.optim.Adagrad, torch.optim.SGD" in message


@pytest.mark.parametrize("optimizer", ["adam", "adagrad", "sgd"])
def test_every_optimizer_preset_is_registered(optimizer: str) -> None:
    """What the compose-time check lets through, ``foldexp eval`` accepts too."""
    cfg = compose_config([f"optimizer={optimizer}"])
    assert cfg.optimizer._target_ in TARGETS


@pytest.mark.parametrize(
    "overrides",
    [["model._target_=os.system"], ["model=custom", "model._target_=torch.optim.SGD"]],
)
def test_a_model_target_that_is_no_module_class_fails_at_compose_time(
    overrides: list[str],
) -> None:
    target = overrides[-1].split("=", 1)[1]
    with pytest.raises(ConfigError, match=rf"^model\._target_='{target}' is not a model class"):
        compose_config(overrides)
