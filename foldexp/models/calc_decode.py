"""``experiment=calc_decode``: a Tree-LSTM encodes a calculator expression, an ``Unfold`` decodes
the digits of its value until an end token.

The encoder is the default experiment's binary Tree-LSTM over the expression tree (operators
read at internal nodes). The decoder is an LSTM cell started from the root's ``(h, c)``; its
tokens are the value's characters (``0``-``9``, ``-``) and an end token. Training is teacher
forced: an ``RNN`` over the target's tokens shifted by a start token, one cross-entropy per
token. Decoding is greedy: ``fb.Unfold`` steps the cell on its own last token until it emits
the end token (or ``max_length`` tokens), a sequence of computed length, batched over the
batch's expressions still decoding. ``forward`` reports token accuracy and sequence exact match
(greedy outside training, teacher forced while training); ``predict`` gives the decoded value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import foldexp.blocks as fb
from foldexp import Compiler
from foldexp.data.calculator import evaluate
from foldexp.kernels import Linear
from foldexp.models.cells import TreeLSTMLeaf, WordTreeLSTMCell

__all__ = [
    "CalcDecoder",
    "DecodeBatch",
    "MAX_TARGET_DIGITS",
    "TOKENS",
    "decode_value",
    "target_tokens",
]

TOKENS = (*"0123456789", "-", "<end>")  # the decoder's outputs; a start token is one more input
END, START = len(TOKENS) - 1, len(TOKENS)


def value_tokens(value: int) -> list[int]:
    """A value's characters as token ids, then the end token."""
    return [TOKENS.index(ch) for ch in str(value)] + [END]


def decode_value(tokens: list[int]) -> float:
    """The value a decoded token sequence spells (NaN if it spells none; ±inf past float64's
    range: ``float(int(text))`` raised OverflowError from 309 digits)."""
    text = "".join(TOKENS[t] for t in tokens if t != END)
    digits = text.removeprefix("-")
    if not (digits.isascii() and digits.isdigit()):
        return float("nan")
    return float(text)  # a decimal string: no int built, no digit limit


#: A target's digits at most, bounded before its value is computed: the exact value of a
#: 5,000-digit product cost quadratic time (and Python refuses str() past 4,300 digits), for a
#: decoder that spells ``max_length`` tokens; ``predict`` does not need it at all.
MAX_TARGET_DIGITS = 1000


def _digit_bound(tree: Any) -> int:
    """An upper bound on the digits of the expression's value and of every value inside it
    (``+``/``-``: one more than the larger; ``*``: the sum), without computing any."""
    bounds: dict[int, int] = {}
    for node in tree.nodes():
        if node.is_leaf:
            bounds[id(node)] = len((node.word or "").removeprefix("-"))
        else:
            a, b = (bounds[id(c)] for c in node.children[:2])
            bounds[id(node)] = a + b if node.word == "*" else max(a, b) + 1
    return bounds[id(tree)]


def target_tokens(tree: Any) -> list[int] | None:
    """The tokens of the expression's value, or ``None`` where it may have more than
    ``MAX_TARGET_DIGITS`` digits (a batch holding one can be predicted, not scored)."""
    if _digit_bound(tree) > MAX_TARGET_DIGITS:
        return None
    return value_tokens(evaluate(tree))


@dataclass
class DecodeBatch:
    """A collated batch: the teacher-forced plan, the greedy one (built when run), targets."""

    forced: Any
    greedy: Any
    targets: list[list[int]]
    size: int
    unscored: int = 0  # expressions whose targets were too long to compute (``target_tokens``)


class _DecoderStep(nn.Module):
    """One greedy step: ``((h, c), x) → (((h, c), x'), token, token == end)``."""

    def __init__(self, cell: nn.LSTMCell, out: nn.Module, tokens: nn.Module) -> None:
        super().__init__()
        self.cell, self.out, self.tokens = cell, out, tokens

    def forward(self, state: tuple, x: torch.Tensor) -> tuple:
        h, c = self.cell(x, state)
        token = self.out(h).argmax(-1)
        return ((h, c), self.tokens(token)), token, token == END


class _ForcedCell(nn.Module):
    """The teacher-forced RNN's cell: ``(x, (h, c)) → (h, (h, c))``."""

    def __init__(self, cell: nn.LSTMCell) -> None:
        super().__init__()
        self.cell = cell

    def forward(self, x: torch.Tensor, state: tuple) -> tuple:
        h, c = self.cell(x, state)
        return h, (h, c)


class CalcDecoder(nn.Module):
    """Tree-LSTM encoder, LSTM decoder of the value's digits (see the module docstring).

    Args:
        vocab: the calculator's words (digits and operators).
        embed_size, hidden_size: sizes of word and token embeddings, and of both LSTMs.
        max_length: the most tokens greedy decoding emits (the end token included).
    """

    def __init__(
        self,
        vocab: Any,
        embed_size: int = 64,
        hidden_size: int = 64,
        max_length: int = 24,
        name: str = "calc_decode",
        **_: Any,
    ) -> None:
        super().__init__()
        self.vocab, self.max_length = vocab, max_length
        self.words = fb.Embedding(len(vocab), embed_size)
        self.leaf = TreeLSTMLeaf(embed_size, hidden_size)
        self.internal = WordTreeLSTMCell(embed_size, hidden_size)
        self.tokens = nn.Embedding(len(TOKENS) + 1, embed_size)
        self.cell = nn.LSTMCell(embed_size, hidden_size)
        self.out = Linear(hidden_size, len(TOKENS))
        token = fb.Scalar("int64") >> fb.Function(self.tokens)
        forced = fb.RNN(_ForcedCell(self.cell), initial_state_from_input=True)
        logits = fb.Map(fb.Function(self.out) >> fb.Metric("logits"))
        targets = fb.Map(fb.Scalar("int64") >> fb.Metric("target"))
        self.forced = Compiler(
            fb.AllOf(
                fb.AllOf(fb.InputTransform(_shifted) >> fb.Map(token), self._encoder())
                >> forced
                >> fb.GetItem(0)
                >> logits,
                fb.InputTransform(_target_part) >> targets,
            )
            >> fb.Void()
        )
        start = fb.InputTransform(_start) >> token
        unfold = fb.Unfold(_DecoderStep(self.cell, self.out, self.tokens), max_length)
        emitted = fb.AllOf(fb.Map(fb.Metric("token")), fb.Length("int64")) >> fb.GetItem(1)
        self.greedy = Compiler(fb.AllOf(self._encoder(), start) >> unfold >> emitted)

    def _encoder(self) -> fb.Block:
        """A ``Tree`` → its root's ``(h, c)``; each call a block of its own, same modules."""
        index = self.vocab.index
        word = (
            fb.InputTransform(lambda node: index(node.word))
            >> fb.Scalar("int64")
            >> fb.Function(self.words)
        )
        tree = fb.ForwardDeclaration(name="expr")
        children = fb.InputTransform(_children) >> fb.Record((tree(), tree()))
        internal = fb.AllOf(word, children) >> fb.Function(self.internal)
        tree.resolve_to(fb.OneOf(_arity, {0: word >> fb.Function(self.leaf), 2: internal}))
        return fb.InputTransform(_tree_part) >> tree()

    def collate(self, trees: list[Any]) -> DecodeBatch:
        known = [target_tokens(t) for t in trees]
        targets = [y if y is not None else [END] for y in known]
        forced = self.forced.build([(t, y) for t, y in zip(trees, targets)])
        unscored = sum(y is None for y in known)
        return DecodeBatch(forced, self.greedy.build(trees), targets, len(trees), unscored)

    def forward(self, batch: DecodeBatch) -> dict[str, torch.Tensor]:
        """Teacher-forced loss; token hits and exact sequences (greedy when not training)."""
        if batch.unscored:
            raise ValueError(
                f"{batch.unscored} expression(s) of the batch may have values of more than "
                f"{MAX_TARGET_DIGITS} digits: they can be predicted, not trained or scored on"
            )
        self.forced.run(batch.forced)
        logits, owner = self.forced.last_metrics["logits"]
        target, _ = self.forced.last_metrics["target"]
        loss = F.cross_entropy(logits, target.to(logits.device))
        if self.training:  # counted on the device: the trainer reads them with the loss
            hits = logits.argmax(-1) == target.to(logits.device)
            misses = torch.zeros(batch.size, dtype=torch.int64, device=logits.device)
            misses.index_add_(0, owner.to(logits.device), (~hits).long())
            tokens, exact = hits.sum().float(), (misses == 0).sum().float()
        else:
            decoded = self.decode(batch)
            tokens = torch.tensor(
                float(sum(_token_hits(d, y) for d, y in zip(decoded, batch.targets)))
            )
            exact = torch.tensor(float(sum(d == y for d, y in zip(decoded, batch.targets))))
        return {
            "loss": loss,
            "token_hits": tokens,
            "tokens": torch.tensor(float(sum(len(y) for y in batch.targets))),
            "exact": exact,
            "count": torch.tensor(float(batch.size)),
        }

    def decode(self, batch: DecodeBatch) -> list[list[int]]:
        """Each expression's greedy tokens (the end token included when emitted)."""
        self.greedy.run(batch.greedy)
        tokens, owner = self.greedy.last_metrics["token"]
        out: list[list[int]] = [[] for _ in range(batch.size)]
        for t, k in zip(tokens.tolist(), owner.tolist()):
            out[k].append(t)
        return out

    @staticmethod
    def summarize(sums: dict[str, float]) -> dict[str, float]:
        return {
            "token_accuracy": sums["token_hits"] / max(1.0, sums["tokens"]),
            "exact_match": sums["exact"] / max(1.0, sums["count"]),
        }

    def predict(self, batch: DecodeBatch) -> torch.Tensor:
        """The decoded value of each expression (NaN where the tokens spell no integer)."""
        return torch.tensor([[decode_value(d)] for d in self.decode(batch)], dtype=torch.float64)

    @staticmethod
    def prediction_columns() -> list[str]:
        return ["value"]


def _token_hits(decoded: list[int], target: list[int]) -> int:
    return sum(d == y for d, y in zip(decoded, target))


def _shifted(example: tuple) -> list[int]:
    """The teacher-forced inputs: the start token, then the target but its last token."""
    return [START, *example[1][:-1]]


def _target_part(example: tuple) -> list[int]:
    return example[1]


def _tree_part(example: Any) -> Any:
    return example[0] if isinstance(example, tuple) else example


def _start(example: Any) -> int:
    return START


def _children(node: Any) -> tuple:
    return node.children


def _arity(node: Any) -> int:
    return len(node.children)
