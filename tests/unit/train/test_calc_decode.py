"""``experiment=calc_decode``: a Tree-LSTM encoder and an ``Unfold`` decoder of the value's
digits — batched decoding == eager, teacher-forced gradients reach every part, the CLI trains
it and ``foldexp predict`` prints decoded values of new expressions."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
import torch

from foldexp.analysis.predict import run_predict
from foldexp.blocks._eager import eval_with_metrics
from foldexp.data.calculator import evaluate, parse_expression
from foldexp.experiments.datasets import calculator
from foldexp.models.calc_decode import END, CalcDecoder, decode_value, value_tokens
from foldexp.train.app import compose_config
from foldexp.train.loop import run_train

TINY = [
    "experiment=calc_decode",
    "dataset.n=300",
    "trainer.epochs=2",
    "trainer.batch_size=16",
    "trainer.progress=false",
    "trainer.plots=false",
    "model.hidden_size=16",
    "model.embed_size=8",
]


def test_expressions_parse_with_precedence_and_refuse_what_is_not_one() -> None:
    assert evaluate(parse_expression("(2+3)*4")) == 20
    assert evaluate(parse_expression("2 + 3*4")) == 14
    assert evaluate(parse_expression("8-3-2")) == 3  # to the left, as in Python
    assert evaluate(parse_expression("9*(1-5)")) == -36
    for bad, where in [("12+3", "character 2"), ("-3", "character 1"), ("(2+3", "the end")]:
        with pytest.raises(ValueError, match=f"not a calculator expression: .* at {where}"):
            parse_expression(bad)


def test_deeply_nested_parentheses_are_that_input_error_not_a_traceback() -> None:
    """``foldexp predict`` turns a ``ValueError`` into the row's error; a ``RecursionError``
    ended the whole command with a traceback, every other row lost."""
    assert evaluate(parse_expression("(" * 60 + "7" + ")" * 60)) == 7
    with pytest.raises(ValueError, match="parentheses nested too deep"):
        parse_expression("(" * 2000 + "1" + ")" * 2000)


def test_value_tokens_round_trip() -> None:
    for value in [0, 7, -36, 43046721]:
        tokens = value_tokens(value)
        assert tokens[-1] == END and decode_value(tokens) == value
    assert math.isnan(decode_value([END])) and math.isnan(decode_value([10, 10, END]))


@pytest.fixture(scope="module")
def model_and_trees() -> tuple[CalcDecoder, list]:
    torch.manual_seed(0)
    bundle = calculator(n=200, max_depth=3, n_classes=10, leaf_prob=0.3, seed=0)
    model = CalcDecoder(bundle.info["vocab"], embed_size=8, hidden_size=16, max_length=7)
    return model, list(bundle.train[:12])


def test_greedy_decoding_batched_equals_eager(model_and_trees: tuple) -> None:
    model, trees = model_and_trees
    model.eval()
    batch = model.collate(trees)
    with torch.no_grad():
        decoded = model.decode(batch)
        assert model.greedy.last_stats["stages"] == 2
        for tree, tokens in zip(trees, decoded):
            length, metrics = eval_with_metrics(model.greedy.root, tree)
            assert [int(t) for t in metrics["token"]] == tokens == tokens[: int(length)]
            assert 1 <= len(tokens) <= 7 and (END not in tokens or tokens[-1] == END)


def test_teacher_forced_loss_reaches_every_parameter(model_and_trees: tuple) -> None:
    model, trees = model_and_trees
    model.train()
    out = model(model.collate(trees))
    assert out["tokens"] == sum(len(value_tokens(evaluate(t))) for t in trees)
    model.zero_grad()
    out["loss"].backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_trains_from_the_cli_and_predicts_new_expressions(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = run_train(compose_config(TINY, out))
    assert result["select_metric"] == "dev_exact_match"
    assert 0.0 <= result["best_dev_exact_match"] <= 1.0
    assert 0.0 <= result["test_token_accuracy"] <= 1.0 and "test_exact_match" in result
    # The decoder's share of sequences stopped by max_length, a column of every epoch.
    capped = pd.read_csv(out / "metrics.csv")["capped_Unfold"]
    assert capped.notna().all() and capped.between(0.0, 1.0).all()
    lines = tmp_path / "new.txt"
    lines.write_text("(2+3)*4\n12+3\n9-7\n")
    rows = run_predict(out, str(lines), tmp_path / "pred.csv")
    assert [r["input"] for r in rows] == ["(2+3)*4", "12+3", "9-7"]
    assert rows[0]["error"] == "" and rows[2]["error"] == ""
    assert "single digits" in rows[1]["error"] and rows[1]["value"] == ""
    float(rows[0]["value"])  # a number (NaN where the tokens spell none)
