"""Trees of any depth: tracing, the eager oracle, scheduling and both executions are
depth-independent (recursing a few frames per level, they stopped at ~150 levels before).

The compiler traces through closures that recurse; an input too deep for them is traced again by
``blocks/_steps.py``'s explicit stack, which must record exactly what the closures would have.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
import torch

import foldexp.blocks as fb
from foldexp import Compiler
from foldexp.blocks._closures import trace_fn
from foldexp.compiler.trace import Trace, trace_batch
from foldexp.data.ptb import parse_tree
from foldexp.data.trees import Tree
from foldexp.data.vocab import Vocabulary
from foldexp.models.tree_lstm import TreeLSTMClassifier, binary_tree_lstm, random_tree
from foldexp.testing import assert_compilers_agree, check_block
from foldexp.types import TensorType

H = 4  # state size: small, so that deep chains stay quick


def chain_tuple(levels: int, vocab: int = 20) -> tuple:
    """A left-deep nested-tuple tree (``binary_tree_lstm``'s input) ``levels`` internal nodes
    deep."""
    tree: tuple = (0,)
    for i in range(levels):
        tree = (tree, ((i * 7 + 1) % vocab,))
    return tree


def chain_ptb(levels: int) -> str:
    """A left-deep labelled tree in PTB text, as SST files hold them."""
    words = ["good", "bad", "movie", "plot"]
    text = "(2 start)"
    for i in range(levels):
        text = f"({i % 5} {text} ({(i + 1) % 5} {words[i % 4]}))"
    return text


@contextmanager
def recursion_limit(limit: int) -> Iterator[None]:
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(limit)
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


def _recorded(tr: Trace) -> dict[str, Any]:
    return {
        "depths": list(tr.val_depth),
        "ops": ([list(d) for d in tr.op_depth], [list(f) for f in tr.op_first], tr.op_args),
        "types": list(tr.types),
        "constants": (
            tr.const_vids,
            [[np.asarray(p).tolist() for p in ps] for ps in tr.const_payloads],
        ),
        "zeros": dict(tr.zero_vid),
        "metrics": {k: (list(i), list(v)) for k, (i, v) in tr.metrics.items()},
    }


def _classifier(trees: list[Tree], **kwargs: Any) -> TreeLSTMClassifier:
    return TreeLSTMClassifier(Vocabulary.from_trees(trees), 5, H, H, **kwargs)


def _tuple_model() -> Compiler:
    return Compiler(binary_tree_lstm(20, H, H) >> fb.GetItem(0))


@pytest.mark.parametrize("model", ["nested_tuples", "labelled_trees", "all_blocks"])
def test_a_deep_input_is_traced_again_with_an_explicit_stack_recording_the_same(
    model: str,
) -> None:
    # 300 levels: too deep for the closures under Python's default limit (the precondition
    # below), shallow enough to trace by plain recursion under a raised one (the reference).
    rng = np.random.default_rng(0)
    if model == "nested_tuples":
        compiler = _tuple_model()
        deep = chain_tuple(300)
        shallow = [random_tree(int(n), 20, rng) for n in (1, 5, 9)]
    elif model == "labelled_trees":
        deep = parse_tree(chain_ptb(300))
        shallow = [parse_tree(chain_ptb(n)) for n in (0, 3, 6)]
        compiler = _classifier([deep, *shallow]).compiler
    else:
        block, chain = _all_blocks()
        compiler = Compiler(block)
        deep, shallow = chain(300), [chain(0), chain(3), chain(8)]
    batch = [shallow[0], deep, shallow[1], deep, shallow[2]]
    with pytest.raises(RecursionError):
        trace_fn(compiler.root, Trace(compiler.ops), fuse=True)(deep)

    fast, fast_outs = trace_batch(compiler.root, compiler.ops, batch, compiler.output_type, True)
    with recursion_limit(20_000):
        ref, ref_outs = trace_batch(compiler.root, compiler.ops, batch, compiler.output_type, True)
    assert _recorded(fast) == _recorded(ref)
    assert np.array_equal(fast_outs, ref_outs)


def test_binary_tree_lstm_on_a_2000_level_chain_matches_eager_values_and_gradients() -> None:
    # The eager oracle (Block.eval, max_depth) walks the chain too; the depth is 2 for the leaf
    # (embedding, leaf cell) plus one per level.
    trees = [chain_tuple(2000), ((3,), (4,)), chain_tuple(5)]
    check_block(
        binary_tree_lstm(20, H, H) >> fb.GetItem(0),
        trees,
        expected_depth=[2002, 3, 7],
        rtol=1e-4,
        atol=1e-5,
    )


def _all_blocks() -> tuple[fb.Block, Callable[[int], dict[str, Any]]]:
    """A recursive block whose recursion passes through every block that traces children (each
    level of ``chain(levels)`` through the next), and the chain maker. Runs of two op blocks
    fuse where closures trace them (``Map``, ``Record``, pipes) and stay unfused where blocks
    are traced by ``_trace`` (``Composition``, ``Reduce``, ``RNN``)."""
    decl = fb.ForwardDeclaration(output_type=TensorType((H,)), name="node")  # all cases recurse
    emb = fb.Embedding(20, H)

    def word() -> fb.Block:
        return fb.GetItem("w") >> fb.Scalar("int64") >> fb.Function(emb)

    def add() -> fb.Block:
        return fb.Function(torch.add)

    comp = fb.Composition(name="body")
    with comp.scope():
        w = (fb.Scalar("int64") >> fb.Function(emb) >> fb.FC(H)).reads(comp.input["w"])
        kids = (fb.Map(decl()) >> fb.Reduce(add() >> fb.Function(torch.tanh), fb.Zeros(H))).reads(
            comp.input["kids"]
        )
        comp.output.reads(add().reads(w, kids))
    cell = fb.Record((decl(), fb.Identity())) >> fb.AllOf(add(), add() >> fb.FC(H))
    cases = {
        "map": fb.Record({"w": fb.Scalar("int64") >> fb.Function(emb), "kids": fb.Map(decl())})
        >> fb.Record((fb.Identity(), fb.Sum()))
        >> add(),
        "fold": fb.AllOf(
            word(),
            fb.GetItem("kids") >> fb.Fold(fb.Record((fb.Identity(), decl())) >> add(), fb.Zeros(H)),
        )
        >> add(),
        "rnn": fb.AllOf(
            word(), fb.GetItem("kids") >> fb.RNN(cell, initial_state=fb.Zeros(H)) >> fb.GetItem(1)
        )
        >> add(),
        "opt": fb.AllOf(word(), fb.GetItem("next") >> fb.Optional(decl())) >> add(),
        "zip": fb.AllOf(
            word(),
            fb.AllOf(fb.GetItem("kids"), fb.GetItem("kids"))
            >> fb.ZipWith(fb.GetItem(0) >> decl())
            >> fb.Sum(),
        )
        >> add(),
        "comp": comp,
    }
    decl.resolve_to(
        fb.OneOf(lambda n: n["k"], cases, pre_block=fb.Identity())
        >> fb.Function(torch.tanh)
        >> fb.FC(H, activation=torch.tanh)
        >> fb.AllOf(fb.Identity(), fb.Metric("node"))
        >> fb.GetItem(0)
    )
    kinds = list(cases)

    def chain(levels: int) -> dict[str, Any]:
        node: dict[str, Any] = {"k": "opt", "w": 1, "next": None}
        for i in range(levels):
            k = kinds[i % len(kinds)]
            node = (
                {"k": k, "w": i % 20, "next": node}
                if k == "opt"
                else {"k": k, "w": i % 20, "kids": [node]}
            )
        return node

    return decl() >> fb.FC(2), chain


def test_every_structural_block_recurses_400_levels_deep() -> None:
    block, chain = _all_blocks()
    check_block(block, [chain(400), chain(7), chain(0)], rtol=1e-4)


def test_agenda_order_and_trace_caching_take_deep_inputs() -> None:
    trees = [chain_tuple(1000), chain_tuple(3)]
    block = binary_tree_lstm(20, H, H) >> fb.GetItem(0)
    plain = Compiler(block)
    assert_compilers_agree(plain, Compiler(block, schedule_order="agenda"), trees)
    cached = Compiler(block, cache_traces=True)
    assert_compilers_agree(plain, cached, trees)
    assert_compilers_agree(plain, cached, trees[::-1])  # from the cache this time
    assert len(cached.trace_cache) == 2  # type: ignore[arg-type]


def _train_step(model: TreeLSTMClassifier, trees: list[Tree]) -> dict[str, torch.Tensor]:
    model.train()
    model.zero_grad()
    stats = model(model.collate(trees))
    stats["loss"].backward()
    return stats


def test_tree_lstm_classifier_trains_and_evaluates_on_a_2000_level_sst_like_tree() -> None:
    deep = parse_tree(chain_ptb(2000))
    assert deep.depth() == 2000 and parse_tree(deep.to_ptb()) == deep
    trees = [deep, parse_tree(chain_ptb(4))]
    model = _classifier(trees)
    stats = _train_step(model, trees)
    assert torch.isfinite(stats["loss"])
    assert int(stats["node_count"]) == deep.size() + trees[1].size()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and bool(torch.isfinite(g).all()) for g in grads)
    model.eval()
    with torch.no_grad():
        assert torch.isfinite(model(model.collate(trees))["loss"])


@pytest.mark.slow
def test_10000_level_chains_train_and_evaluate() -> None:
    # The acceptance: a 10,000-level chain trains (forward, loss, backward through the
    # compiled model) and evaluates, as a labelled Tree and as nested tuples; the eager oracle
    # agrees (a 10k-step LSTM chain: float32 rounding accumulates, hence the tolerance).
    deep = parse_tree(chain_ptb(10_000))
    model = _classifier([deep])
    stats = _train_step(model, [deep])
    assert torch.isfinite(stats["loss"])
    assert all(bool(torch.isfinite(p.grad).all()) for p in model.parameters() if p.grad is not None)
    model.eval()
    with torch.no_grad():
        assert torch.isfinite(model(model.collate([deep]))["loss"])

    tree = chain_tuple(10_000)
    compiler = _tuple_model()
    out = compiler([tree])
    out.square().sum().backward()
    assert all(bool(torch.isfinite(p.grad).all()) for p in compiler.parameters())
    eager = compiler.root.eval(tree)
    torch.testing.assert_close(out[0], eager, rtol=1e-3, atol=1e-4)
    assert compiler.root.max_depth(tree) == 10_002
