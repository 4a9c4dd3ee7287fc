"""The paper's four listings (``foldexp.models.paper``): values against the equations written
directly in PyTorch, and batched == eager on mixed batches, values and gradients."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import foldexp.blocks as fb
from foldexp.models import paper
from foldexp.testing import check_block
from foldexp.types import TensorType, TupleType

WORDS = "the cat sat on a mat while dog ran".split()


@pytest.fixture
def embeddings(rng: np.random.Generator) -> tuple[dict[str, int], np.ndarray]:
    word_idx = {w: i + 1 for i, w in enumerate(WORDS)}  # row 0: unknown words (Optional's zero)
    return word_idx, rng.normal(size=(len(WORDS) + 1, 5)).astype(np.float32)


def test_pipeline_section_3_3(embeddings: tuple[dict[str, int], np.ndarray]) -> None:
    word_idx, matrix = embeddings
    ns = paper.pipeline(word_idx, matrix, d=6, n=3)
    texts = ["the cat sat", "", "a dog ran on the zebra mat", "cat"]
    check_block(ns.word2vec, ["cat", "zebra"], expected=[matrix[2], matrix[0]])
    depth = [2 * len(t.split()) + 1 if t else 0 for t in texts]  # Concat, FC per word
    check_block(ns.text2vec, texts, expected_depth=depth)
    check_block(ns.text2logits, texts)
    records = [{"text": t, "label": k % 3} for k, t in enumerate(texts)]
    comp = check_block(ns.loss, records)
    logits = torch.stack([ns.text2logits.eval(t) for t in texts])
    want = torch.nn.functional.cross_entropy(logits, torch.tensor([0, 1, 2, 0]), reduction="none")
    torch.testing.assert_close(comp(records), want)
    assert ns.text2vec.output_type == TensorType(6)


def test_tree_lstm_section_3_5(embeddings: tuple[dict[str, int], np.ndarray]) -> None:
    word_idx, matrix = embeddings
    word2vec = paper.pipeline(word_idx, matrix, d=2, n=2).word2vec
    n = 4
    state_size = (TensorType(n), TensorType(n))
    ns = paper.tree_lstm(word2vec, embedding_size=5, state_size=state_size)
    rng = np.random.default_rng(3)

    def tree(k: int) -> dict:
        if k == 1:
            return {"word": WORDS[int(rng.integers(len(WORDS)))] if rng.random() < 0.8 else "?"}
        j = int(rng.integers(1, k))
        return {"left": tree(j), "right": tree(k - j)}

    trees = [tree(k) for k in [1, 2, 3, 8, 5, 17]]
    root = ns.expr()
    root.infer(fb.PyObjectType())  # sizes the cell from its input type
    cell = ns.expr_def.blocks[-1].fn
    zeros = torch.zeros(1, n)

    def direct(t: dict) -> tuple[torch.Tensor, torch.Tensor]:  # eqs. (2) and (3) of §3.5
        if len(t) == 1:
            x = torch.as_tensor(matrix[word_idx.get(t["word"], 0)]).unsqueeze(0)
            return cell(x, ((zeros, zeros), (zeros, zeros)))
        return cell(torch.zeros(1, 5), (direct(t["left"]), direct(t["right"])))

    expected = [tuple(s[0].detach() for s in direct(t)) for t in trees]
    check_block(root, trees, expected=expected)
    assert ns.expr.output_type == TupleType(*state_size)
    logits = ns.expr() >> fb.GetItem(0) >> fb.FC(5, activation=None)
    check_block(logits, trees)


def _attention_direct(a: torch.nn.Module, h: torch.Tensor) -> torch.Tensor:
    """Raffel & Ellis eq. (1): e = a(h), α = softmax(e), c = Σ α h."""
    alpha = torch.softmax(a(h), dim=0)
    return (alpha * h).sum(0)


def test_feed_forward_attention_appendix_a(rng: np.random.Generator) -> None:
    a = fb.FC(1, activation=torch.tanh)
    attention = paper.feed_forward_attention(a)
    seqs = [rng.normal(size=(k, 3)).astype(np.float32).tolist() for k in [1, 4, 7, 2, 3]]
    block = fb.Map(fb.Vector(3)) >> attention
    block.infer(fb.PyObjectType())
    expected = [_attention_direct(a, torch.tensor(s)).detach() for s in seqs]
    check_block(block, seqs, expected=expected)
    # A learned layer before the attention, as in the paper's experiment.
    model = fb.Map(fb.Vector(3) >> fb.FC(4)) >> paper.feed_forward_attention(fb.FC(1))
    check_block(model >> fb.FC(1, activation=None), seqs + [[]])


def _molecule(rng: np.random.Generator, atoms: int, n: int = 3, m: int = 2) -> tuple:
    a = rng.normal(size=(atoms, n)).round(3)
    p = rng.normal(size=(atoms, atoms, m)).round(3)
    p = (p + p.transpose(1, 0, 2)) / 2  # p_ij = p_ji, p_ii = 0
    p[np.arange(atoms), np.arange(atoms)] = 0
    return a.tolist(), p.tolist()


def _weave_direct(fs: list[Callable[..., Any]], a: torch.Tensor, p: torch.Tensor) -> tuple:
    """Appendix B eqs. (4) and (5), one molecule at a time."""
    f_a_a, f_p_a, f_a, f_a_p, f_p_p, f_p = fs
    big_n = a.shape[0]
    a_y = [
        f_a(torch.cat([f_a_a(a[i : i + 1]), f_p_a(p[i]).sum(0, keepdim=True)], 1))[0]
        for i in range(big_n)
    ]

    def pair(i: int, j: int) -> torch.Tensor:
        ai, aj = a[i : i + 1], a[j : j + 1]
        both_ways = f_a_p(torch.cat([ai, aj], 1)) + f_a_p(torch.cat([aj, ai], 1))
        return f_p(torch.cat([both_ways, f_p_p(p[i, j : j + 1])], 1))[0]

    p_y = [[pair(i, j) for j in range(big_n)] for i in range(big_n)]
    return a_y, p_y


def test_weave_module_appendix_b(rng: np.random.Generator, check_metrics: Any) -> None:
    fs = [fb.FC(4) for _ in range(6)]
    weave = paper.weave_module(*fs)
    inputs = fb.Record((fb.Map(fb.Vector(3)), fb.Map(fb.Map(fb.Vector(2)))))
    mols = [_molecule(rng, k) for k in [1, 3, 0, 4, 2]]

    typed = inputs >> weave
    for mol in mols:
        a_y, p_y = typed.eval(mol)
        want_a, want_p = _weave_direct(
            fs, torch.tensor(mol[0]).float(), torch.tensor(mol[1]).float()
        )
        assert len(a_y) == len(want_a) and [len(r) for r in p_y] == [len(r) for r in want_p]
        for got, want in zip(a_y, want_a):
            torch.testing.assert_close(got, want.detach())
        for got_row, want_row in zip(p_y, want_p):
            for got, want in zip(got_row, want_row):
                torch.testing.assert_close(got, want.detach())

    pooled = typed >> (fb.Sum(), fb.Map(fb.Sum()) >> fb.Sum())
    check_block(pooled, mols)
    # Every atom and pair output, batched == eager, through metrics.
    each = typed >> (
        fb.Map(fb.Function(lambda v: v.sum(1)) >> fb.Metric("a_y")),
        fb.Map(fb.Map(fb.Function(lambda v: v.sum(1)) >> fb.Metric("p_y"))),
    )
    comp = check_metrics(each >> fb.Void(), mols, ["a_y", "p_y"])
    assert comp.last_metrics["p_y"][0].shape == (1 + 9 + 0 + 16 + 4,)
    assert weave.input_type == TupleType(
        fb.SequenceType(TensorType(3)), fb.SequenceType(fb.SequenceType(TensorType(2)))
    )


def test_weave_modules_stack() -> None:
    rng = np.random.default_rng(5)
    first = paper.weave_module(*[fb.FC(4) for _ in range(6)])
    second = paper.weave_module(*[fb.FC(3) for _ in range(6)])
    inputs = fb.Record((fb.Map(fb.Vector(3)), fb.Map(fb.Map(fb.Vector(2)))))
    model = inputs >> first >> second >> fb.GetItem(0) >> fb.Sum()
    check_block(model, [_molecule(rng, k) for k in [2, 3, 1]])


def test_listing_line_counts_match_the_readme() -> None:
    counts = {
        "pipeline": paper.listing_lines(paper.pipeline),
        "tree_lstm": paper.listing_lines(paper.tree_lstm),
        "feed_forward_attention": paper.listing_lines(paper.feed_forward_attention),
        "weave_module": paper.listing_lines(paper.weave_module),
    }
    # The paper prints 10, 8, 8 and 8 + 11 lines for these listings.
    assert counts == {
        "pipeline": 10,
        "tree_lstm": 8,
        "feed_forward_attention": 8,
        "weave_module": 19,
    }
    readme = (Path(__file__).parents[3] / "README.md").read_text()
    for name, count in counts.items():
        row = re.search(rf"^\|[^\n]*`{name}`[^\n]*$", readme, re.M)
        assert row is not None, f"README's Blocks table has no row for {name}"
        assert f"| {count} |" in row.group(0), f"README's row for {name} lacks {count}"
