"""calc_decode: decoding a long value and predicting a huge expression stay cheap and never
raise; ``foldexp ensemble`` on such a run is one line (issue 52, row 6 and a Low row).

Before: ``decode_value`` raised OverflowError from 309 digits (``float(int(text))``), and
``collate`` computed the exact value of every expression, also for ``predict`` (a 5,000-digit
product: quadratic, and past Python's 4,300-digit limit of ``str(int)``).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from foldexp.analysis.predict import run_predict
from foldexp.cli import main
from foldexp.data.calculator import parse_expression
from foldexp.models import calc_decode
from foldexp.models.calc_decode import TOKENS, decode_value, target_tokens
from foldexp.train.app import compose_config
from foldexp.train.loop import run_train


def _tokens(text: str) -> list[int]:
    return [TOKENS.index(ch) for ch in text]


def test_a_long_decode_is_a_float_not_an_error() -> None:
    assert decode_value(_tokens("9" * 400)) == math.inf
    assert decode_value(_tokens("-" + "9" * 5000)) == -math.inf
    assert decode_value(_tokens("12")) == 12.0
    assert math.isnan(decode_value(_tokens("1-2")))
    assert math.isnan(decode_value([]))


def test_a_huge_expression_has_no_target_computed(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(tree: object) -> int:
        raise AssertionError("evaluated")

    monkeypatch.setattr(calc_decode, "evaluate", refuse)
    assert target_tokens(parse_expression(_power(12))) is None  # 9**4096: 3,909 digits
    monkeypatch.undo()
    assert target_tokens(parse_expression(_power(3))) == _tokens(str(9**8)) + [
        TOKENS.index("<end>")
    ]


def _power(levels: int) -> str:
    """A balanced product of 2**levels nines (calculator numbers are single digits)."""
    return "9" if levels == 0 else f"({_power(levels - 1)}*{_power(levels - 1)})"


@pytest.fixture(scope="module")
def decoder_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("calc_decode") / "run"
    overrides = ["experiment=calc_decode", "dataset.n=40", "trainer.epochs=1",
                 "trainer.batch_size=16", "trainer.progress=false", "trainer.plots=false",
                 "model.hidden_size=8", "model.embed_size=4", "model.max_length=6"]  # fmt: skip
    run_train(compose_config(overrides, out))
    return out


def test_predict_of_a_huge_expression_is_a_row(decoder_run: Path, tmp_path: Path) -> None:
    data = tmp_path / "in.txt"
    data.write_text(f"{_power(12)}\n(2+3)\n")
    rows = run_predict(decoder_run, str(data))
    assert len(rows) == 2 and all(not row["error"] for row in rows), rows


def test_ensemble_of_a_decoder_is_one_line(
    decoder_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["ensemble", str(decoder_run)])
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and len(err.splitlines()) == 1, err
    assert "CalcDecoder" in err
