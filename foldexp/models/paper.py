"""The Fold paper's models as listings (Looks et al. 2017, §3.3, §3.5, Appendices A and B).

Each function's body is the paper's listing with TensorFlow ops translated to PyTorch ops and
nothing else: the same names, the same blocks, in the same order. What a listing takes from its
surroundings (``word_idx``, ``word_matrix``, sizes, the learnable functions) comes in as
arguments, and the listing's result goes out with ``return``. Where the printed listing does not
type-check as written, the smallest fix is made and marked ``# fix:``.

- ``pipeline``: §3.3, words → ``word2vec`` → an RNN ``Fold`` → logits → a loss.
- ``tree_lstm``: §3.5, a binary Tree-LSTM over ``ForwardDeclaration`` and ``OneOf``.
- ``feed_forward_attention``: Appendix A (Raffel & Ellis 2016) with ``Composition``.
- ``weave_module``: Appendix B, the weave module of Kearnes et al. (2016), nested compositions.

``listing_lines`` counts a listing's lines the way the paper's Appendix C does.
"""

from __future__ import annotations

import inspect
import io
import tokenize
from collections.abc import Callable, Mapping
from types import SimpleNamespace
from typing import Any

import torch
from torch.nn import functional as F

from foldexp.blocks import (
    FC,
    AllOf,
    Block,
    Broadcast,
    Composition,
    Concat,
    Embedding,
    Fold,
    ForwardDeclaration,
    Function,
    GetItem,
    InputTransform,
    Map,
    OneOf,
    Optional,
    Record,
    Scalar,
    Sum,
    Zeros,
    ZipWith,
)
from foldexp.models.cells import TreeLSTMCell

__all__ = [
    "pipeline",
    "tree_lstm",
    "TreeLSTM",
    "feed_forward_attention",
    "weave_module",
    "sparse_softmax_cross_entropy",
    "listing_lines",
]


def sparse_softmax_cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``tf.nn.sparse_softmax_cross_entropy_with_logits``: one loss per row."""
    return F.cross_entropy(logits, labels, reduction="none")


def pipeline(word_idx: Mapping[str, int], word_matrix: Any, d: int, n: int) -> SimpleNamespace:
    """§3.3: (text, label) pairs → a per-example loss, through pretrained word embeddings.

    Returns the listing's blocks by name: ``word2vec``, ``split``, ``rnn_cell``, ``text2vec``,
    ``text2logits``, ``record`` and ``loss``. Unknown words embed as row 0 (``Optional``'s
    zero), as in the paper.
    """
    # fmt: off
    word2vec = (InputTransform(word_idx.get) >>
                Optional(Scalar('int32')) >>
                Function(Embedding(initializer=word_matrix)))

    split = InputTransform(str.split)
    rnn_cell = Concat() >> Function(FC(d, activation=torch.relu))
    text2vec = split >> Map(word2vec) >> Fold(rnn_cell, Zeros(d))

    text2logits = text2vec >> Function(FC(n, activation=None))

    record = Record([('text', text2logits),
                     ('label', Scalar('int64'))])
    loss = record >> Function(sparse_softmax_cross_entropy)
    # fmt: on
    return SimpleNamespace(
        word2vec=word2vec,
        split=split,
        rnn_cell=rnn_cell,
        text2vec=text2vec,
        text2logits=text2logits,
        record=record,
        loss=loss,
    )


def TreeLSTM(state_size: Any) -> Block:
    """The paper's ``TreeLSTM(state_size)``: ``(x, (left, right)) → (h, c)`` (Tai et al.)."""
    h, _ = state_size
    return Function(TreeLSTMCell(h.shape[0]))


def tree_lstm(word2vec: Block, embedding_size: int, state_size: Any) -> SimpleNamespace:
    """§3.5: a binary Tree-LSTM; returns ``expr`` (the declaration), ``word``, ``pair`` and
    ``expr_def``. ``expr()`` maps a tree to its root state ``(h, c)``.

    A tree is a leaf ``{'word': w}`` or a pair ``{'left': tree, 'right': tree}``, so ``len``
    tells them apart. ``state_size`` is the type of one LSTM state, ``(TensorType(n),
    TensorType(n))`` for ``(h, c)``; ``Zeros((state_size, state_size))`` is a leaf's two zero
    child states.
    """
    # fmt: off
    expr = ForwardDeclaration()
    word = AllOf(Record([('word', word2vec)]) >> GetItem(0),  # fix: unwrap the 1-field record
                 Zeros((state_size, state_size)))
    pair = AllOf(Zeros(embedding_size),
                 Record([('left', expr()), ('right', expr())]))
    expr_def = (OneOf(key_fn=len, case_blocks=[(1, word), (2, pair)]) >>
                TreeLSTM(state_size))
    expr.resolve_to(expr_def)
    # fmt: on
    return SimpleNamespace(expr=expr, word=word, pair=pair, expr_def=expr_def)


def feed_forward_attention(a: Any) -> Composition:
    """Appendix A: ``c = Σ_t α_t h_t`` with ``α = softmax(a(h))`` over a sequence ``h``.

    ``a`` is the learnable scoring function from a vector ``h_t`` to a 1-vector ``e_t`` (e.g.
    ``FC(1, activation=torch.tanh)``); the input is a sequence of vectors.
    """
    attention = Composition()
    with attention.scope():
        h = attention.input
        exp_e = Map(a >> Function(torch.exp)).reads(h)
        z = (Sum() >> Broadcast()).reads(exp_e)
        alpha = ZipWith(Function(torch.div)).reads(exp_e, z)
        c = (ZipWith(Function(torch.mul)) >> Sum()).reads(alpha, h)
        attention.output.reads(c)
    return attention


def weave_module(f_a_a: Any, f_p_a: Any, f_a: Any, f_a_p: Any, f_p_p: Any, f_p: Any) -> Composition:
    """Appendix B: one weave module, ``(atoms, pairs) → (atoms, pairs)``.

    The input is ``(a_x, p_x)``: a sequence of N atom vectors and an N × N nested sequence of
    pair vectors; the six learnable functions are blocks or layers (e.g. ``FC``). ``f_a_p``
    appears twice and is one function: both directions share its weights (and batch together).
    """
    a_i_to_p = Composition()
    with a_i_to_p.scope():
        a_x_i = Broadcast().reads(a_i_to_p.input[0])
        a_x = a_i_to_p.input[1]
        f_i_j = ZipWith(Concat() >> f_a_p).reads(a_x_i, a_x)
        f_j_i = ZipWith(Concat() >> f_a_p).reads(a_x, a_x_i)
        p = ZipWith(Sum()).reads(f_i_j, f_j_i)
        a_i_to_p.output.reads(p)

    weave = Composition()
    with weave.scope():
        a_x = weave.input[0]
        p_x = weave.input[1]
        a_to_a = Map(f_a_a).reads(a_x)
        p_to_a = Map(Map(f_p_a) >> Sum()).reads(p_x)
        a_y = ZipWith(Concat() >> f_a).reads(a_to_a, p_to_a)
        a_to_p = ZipWith(a_i_to_p).reads(a_x, Broadcast().reads(a_x))
        p_to_p = Map(Map(f_p_p)).reads(p_x)
        p_y = ZipWith(ZipWith(Concat() >> f_p)).reads(a_to_p, p_to_p)
        weave.output.reads(a_y, p_y)
    return weave


def listing_lines(fn: Callable[..., Any]) -> int:
    """Lines of a listing counted as in the paper's Appendix C (with cloc): the function's body
    without blank lines, comments or the docstring, and without the ``def`` line and the final
    ``return``, which wrap the paper's top-level code into a function."""
    src = inspect.getsource(fn)
    code_lines: set[int] = set()
    doc_lines: set[int] = set()
    prev = None
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.STRING and prev in (tokenize.INDENT, tokenize.NEWLINE):
            doc_lines.update(range(tok.start[0], tok.end[0] + 1))  # a docstring
        elif tok.type not in (
            tokenize.COMMENT,
            tokenize.NL,
            tokenize.NEWLINE,
            tokenize.INDENT,
            tokenize.DEDENT,
            tokenize.ENDMARKER,
        ):
            code_lines.update(range(tok.start[0], tok.end[0] + 1))
        if tok.type not in (tokenize.COMMENT, tokenize.NL):
            prev = tok.type
    lines = src.splitlines()
    body_start = next(i for i, line in enumerate(lines, 1) if line.rstrip().endswith(":"))
    last_return = max(i for i, line in enumerate(lines, 1) if line.strip().startswith("return"))
    ret_end = max(code_lines)
    keep = {
        i for i in code_lines - doc_lines if body_start < i and not (last_return <= i <= ret_end)
    }
    return len(keep)
