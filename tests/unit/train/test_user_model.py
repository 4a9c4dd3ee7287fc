"""A model of one's own trains through ``foldexp train model=custom model._target_=…``.

The model is ``docs/examples/bag_of_words.py``, the README's example; it receives its own keys
and the dataset facts it names, nothing else. A class without the contract's methods, and keys
it does not take, fail before any work.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from foldexp.config.errors import ConfigError
from foldexp.models.contract import ModelContractError
from foldexp.train.app import compose_config
from foldexp.train.loop import run_train

EXAMPLES = Path(__file__).resolve().parents[3] / "docs" / "examples"
TINY = ["dataset.n=60", "trainer.epochs=2", "trainer.progress=false", "trainer.plots=false"]
CUSTOM = ["model=custom", "model._target_=bag_of_words.BagOfWords"]


@pytest.fixture(autouse=True)
def _examples_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES))


def test_the_docs_example_trains_and_selects_on_its_own_metric(tmp_path: Path) -> None:
    results = run_train(compose_config([*TINY, *CUSTOM, "+model.size=8"], tmp_path))
    assert results["select_metric"] == "dev_accuracy"
    assert 0.0 <= results["test_accuracy"] <= 1.0
    assert results["config"]["model"] == {
        "_target_": "bag_of_words.BagOfWords",
        "name": "custom",
        "size": 8,
    }


def test_a_key_the_model_does_not_take_fails_at_compose_time(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"model\.hidden is not a parameter of .*size"):
        compose_config([*TINY, *CUSTOM, "+model.hidden=8"], tmp_path)


def test_a_model_without_the_contract_fails_before_any_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = tmp_path / "half_model.py"
    module.write_text(
        "import torch\n"
        "class HalfModel(torch.nn.Module):\n"
        "    def __init__(self, num_classes):\n"
        "        super().__init__()\n"
        "    def forward(self, batch):\n"
        "        return {}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = compose_config([*TINY, "model=custom", "model._target_=half_model.HalfModel"], tmp_path)
    with pytest.raises(ModelContractError, match=r"has no collate, summarize methods"):
        run_train(cfg)
    assert not (tmp_path / "checkpoints").exists()


def test_an_experiments_model_keys_do_not_reach_a_users_model(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """experiment=text_csv sets model.hidden_size for its LSTM: a user's model failed on it."""
    args = ["experiment=text_csv", "dataset.path=reviews.csv", *CUSTOM, "+model.size=8"]
    with caplog.at_level("INFO", logger="foldexp.config.overrides"):
        cfg = compose_config(args, tmp_path)
    assert dict(cfg.model) == {"_target_": "bag_of_words.BagOfWords", "name": "custom", "size": 8}
    assert "model.hidden_size, model.dropout (of experiment=text_csv" in caplog.text
    # a key the user types is the user's, even one the preset also sets
    with pytest.raises(ConfigError, match=r"model\.dropout is not a parameter of"):
        compose_config([*args, "model.dropout=0.1"], tmp_path)
    # foldexp's own models keep the preset's keys
    assert compose_config(args[:2], tmp_path).model.hidden_size == 150


def test_a_users_model_file_keeps_its_own_keys(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A model file of the user's own (``conf/model/bow.yaml`` on ``hydra.searchpath``) gives
    its model its keys; they were dropped as if an experiment preset had set them, and the
    model trained with its default size, saying only that in an INFO line."""
    (tmp_path / "conf" / "model").mkdir(parents=True)
    (tmp_path / "conf" / "model" / "bow.yaml").write_text(
        "_target_: bag_of_words.BagOfWords\nname: bow\nsize: 48\n"
    )
    search = f"hydra.searchpath=[file://{tmp_path / 'conf'}]"
    with caplog.at_level("INFO", logger="foldexp.config.overrides"):
        cfg = compose_config([*TINY, "model=bow", search], tmp_path)
    assert dict(cfg.model) == {"_target_": "bag_of_words.BagOfWords", "name": "bow", "size": 48}
    assert "are for foldexp's own model" not in caplog.text
    # a foldexp preset's keys still stay away from it, and the file's own keys still reach it
    args = ["experiment=text_csv", "dataset.path=reviews.csv", "model=bow", search]
    assert dict(compose_config(args, tmp_path).model) == {
        "_target_": "bag_of_words.BagOfWords",
        "name": "bow",
        "size": 48,
    }


def test_a_model_that_extends_its_list_key_gets_the_configured_list_each_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The memory check builds the model once on the meta device before the real build: both
    received the settings' own list, so what the first build appended to it (a constructor
    that extends ``sizes`` with its output width) reached the second, and the run's model."""
    (tmp_path / "listy_model.py").write_text(
        "from bag_of_words import BagOfWords\n"
        "class Listy(BagOfWords):\n"
        "    def __init__(self, vocab, num_classes, sizes):\n"
        "        if len(sizes) != 1:\n"
        "            raise ValueError(f'sizes={sizes}: another build extended them')\n"
        "        sizes.append(num_classes)\n"
        "        super().__init__(vocab, num_classes, size=sizes[0])\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    model = ["model=custom", "model._target_=listy_model.Listy", "+model.sizes=[8]"]
    results = run_train(compose_config([*TINY, *model], tmp_path / "run"))
    assert results["config"]["model"]["sizes"] == [8]


def test_a_users_target_on_foldexps_model_group_gets_none_of_its_keys(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``model._target_=my.Model`` without ``model=custom``: the group chosen is foldexp's
    (``tree_lstm``, the default experiment's), whose schema's keys (``embed_size``, ...) are
    for its own model. They were dropped until only an experiment preset's keys were; then
    the run failed on ``model.embed_size is not a parameter of`` a key the user never set."""
    with caplog.at_level("INFO", logger="foldexp.config.overrides"):
        cfg = compose_config([*TINY, "model._target_=bag_of_words.BagOfWords"], tmp_path)
    assert dict(cfg.model) == {"_target_": "bag_of_words.BagOfWords", "name": "tree_lstm"}
    assert "model.embed_size" in caplog.text
    # a key the user types still reaches the model
    cfg = compose_config(
        [*TINY, "model._target_=bag_of_words.BagOfWords", "+model.size=8"], tmp_path
    )
    assert dict(cfg.model)["size"] == 8
