"""The model contract's docstring example (``foldexp/models/contract.py``) runs as written: it
used ``Batch`` without defining it (a ``NameError`` when copied)."""

from __future__ import annotations

import re

import torch

import foldexp.models.contract as contract
from foldexp.data.vocab import Vocabulary


def _example() -> str:
    doc = contract.__doc__ or ""
    body = doc.split("A minimal model of one's own", 1)[1].split("::\n", 1)[1]
    lines = [ln[4:] for ln in body.splitlines() if ln.startswith("    ") or not ln.strip()]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines))


def test_the_contract_example_runs_as_copied() -> None:
    space: dict = {}
    exec(compile(_example(), "contract.py docstring", "exec"), space)
    vocab = Vocabulary.from_tokens(["a", "good", "film", "bad"])
    model = space["BagOfWords"](vocab, num_classes=2, size=4)
    contract.check_model(model, "BagOfWords")
    batch = model.collate([(["a", "good", "film"], 1), (["bad"], 0)])
    out = model(batch)
    out["loss"].backward()
    assert out["count"] == 2 and torch.isfinite(out["loss"])
    sums = {k: float(v.detach()) if torch.is_tensor(v) else v for k, v in out.items()}
    assert set(model.summarize(sums)) == {"accuracy"}
