"""``bench=dynet_tasks``: the DyNet paper's Table 2 tasks, trained on our engine.

Sizes are DyNet's Table 1: an LSTM language model (vocabulary 10k, embeddings 128, LSTM 256,
minibatches of 1, 4, 16, 64 sentences; words/s), a BiLSTM tagger (vocabulary 69.5k, 9 tags,
embeddings 128, LSTMs 50, an MLP of 32; words/s) and a Tree-LSTM sentiment classifier
(vocabulary 18.3k, 5 classes, 128/128; sentences/s). A step is a full training step: build,
run, loss, backward and a dense Adam update, as DyNet's CPU figures were (one thread, dense
updates). The data is synthetic with each corpus's mean sentence length (PTB 21, the tagger's 25,
SST 19; ``trees.sentence_lengths``); tree shapes are random binary trees.

Per-word losses come out through ``Metric`` blocks (every hidden state and every target), so the
softmax runs once per batch over all words, not once per word.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import foldexp.blocks as fb
from foldexp import Compiler
from foldexp.bench.grid import Cell, Record
from foldexp.bench.published import DYNET_TASKS
from foldexp.bench.timing import Case, Env, Stopwatch, run_interleaved
from foldexp.bench.trees import make_tree, sentence_lengths
from foldexp.models.tree_lstm import tree_lstm_classifier

__all__ = ["dynet_task_cells", "TASK_UNITS"]

TASK_UNITS = {"rnnlm": "words", "tagger": "words", "treelstm": "sentences"}


class _LSTMStep(nn.Module):
    """``(x, (h, c)) → (h, (h, c))``: an LSTM step in ``RNN``'s calling convention."""

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        self.cell = nn.LSTMCell(input_size, hidden_size)

    def forward(self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]) -> Any:
        h, c = self.cell(x, state)
        return h, (h, c)


def _zero_state(hidden: int) -> fb.Block:
    return fb.Zeros(fb.TupleType(fb.TensorType(hidden), fb.TensorType(hidden)))


class _RNNLM(nn.Module):
    """Input: a sentence (word ids); predicts every next word, ``</s>`` included (id 0)."""

    def __init__(self, vocab: int, embed: int, hidden: int) -> None:
        super().__init__()
        self.embed = fb.Embedding(vocab, embed)
        self.step = _LSTMStep(embed, hidden)
        self.out = nn.Linear(hidden, vocab)
        word = fb.Scalar("int64")
        xs = fb.Map(fb.GetItem(0) >> word >> fb.Function(self.embed))
        hs = xs >> fb.RNN(self.step, initial_state=_zero_state(hidden)) >> fb.GetItem(0)
        ys = fb.Map(fb.GetItem(1) >> word >> fb.Metric("target"))
        pairs = fb.InputTransform(lambda s: list(zip([0, *s], [*s, 0])))
        self.compiler = Compiler(pairs >> fb.AllOf(hs >> fb.Map(fb.Metric("h")), ys) >> fb.Void())

    def loss(self, batch: list[Any]) -> torch.Tensor:
        self.compiler(batch)
        h, _ = self.compiler.last_metrics["h"]
        y, _ = self.compiler.last_metrics["target"]
        return F.cross_entropy(self.out(h), y)


class _Tagger(nn.Module):
    """Input: ``(words, tags)``; a BiLSTM, an MLP per word, a softmax over the tags."""

    def __init__(self, vocab: int, tags: int, embed: int, hidden: int, mlp: int) -> None:
        super().__init__()
        self.embed = fb.Embedding(vocab, embed)
        self.fwd, self.bwd = _LSTMStep(embed, hidden), _LSTMStep(embed, hidden)
        self.mlp = nn.Sequential(nn.Linear(2 * hidden, mlp), nn.Tanh())
        self.out = nn.Linear(mlp, tags)
        emb = fb.Map(fb.Scalar("int64") >> fb.Function(self.embed))
        fwd = fb.RNN(self.fwd, initial_state=_zero_state(hidden)) >> fb.GetItem(0)
        bwd = (
            fb.Slice(step=-1)
            >> fb.RNN(self.bwd, initial_state=_zero_state(hidden))
            >> fb.GetItem(0)
            >> fb.Slice(step=-1)
        )
        feats = (
            emb
            >> fb.AllOf(fwd, bwd)
            >> fb.Zip()
            >> fb.Map(fb.Concat() >> fb.Function(self.mlp) >> fb.Metric("feat"))
        )
        tags_ = fb.Map(fb.Scalar("int64") >> fb.Metric("tag"))
        self.compiler = Compiler(fb.Record((feats, tags_)) >> fb.Void())

    def loss(self, batch: list[Any]) -> torch.Tensor:
        self.compiler(batch)
        feat, _ = self.compiler.last_metrics["feat"]
        tag, _ = self.compiler.last_metrics["tag"]
        return F.cross_entropy(self.out(feat), tag)


class _TreeLSTM(nn.Module):
    """Input: ``(tree, label)``; a binary Tree-LSTM, loss at the root."""

    def __init__(self, vocab: int, classes: int, embed: int, hidden: int) -> None:
        super().__init__()
        self.compiler = Compiler(tree_lstm_classifier(vocab, embed, hidden, classes))

    def loss(self, batch: list[Any]) -> torch.Tensor:
        logits = self.compiler([t for t, _ in batch])
        return F.cross_entropy(logits, torch.tensor([y for _, y in batch], device=logits.device))


def _data(task: str, count: int, seed: int) -> tuple[list[Any], list[int]]:
    """Synthetic sentences (or trees) and their word counts."""
    spec = DYNET_TASKS[task]
    rng = np.random.default_rng(seed)
    lengths = sentence_lengths(count, spec["mean_length"], rng).tolist()
    if task == "rnnlm":
        data = [rng.integers(1, spec["vocab"], size=n).tolist() for n in lengths]
    elif task == "tagger":
        data = [
            (
                rng.integers(spec["vocab"], size=n).tolist(),
                rng.integers(spec["tags"], size=n).tolist(),
            )
            for n in lengths
        ]
    else:
        data = [
            (make_tree(n, spec["vocab"], rng), int(rng.integers(spec["classes"]))) for n in lengths
        ]
    return data, lengths


def _model(task: str) -> nn.Module:
    s = DYNET_TASKS[task]
    if task == "rnnlm":
        return _RNNLM(s["vocab"], s["embed"], s["hidden"])
    if task == "tagger":
        return _Tagger(s["vocab"], s["tags"], s["embed"], s["hidden"], s["mlp"])
    return _TreeLSTM(s["vocab"], s["classes"], s["embed"], s["hidden"])


@contextmanager
def _threads(n: int) -> Iterator[int]:
    old = torch.get_num_threads()
    if n > 0:
        torch.set_num_threads(n)
    try:
        yield torch.get_num_threads()
    finally:
        torch.set_num_threads(old)


def dynet_task_cells(bench: Any, env: Env, seed: int) -> list[Cell]:
    """One cell per (task, minibatch size)."""
    dt = bench.dynet_tasks
    sizes = {
        "rnnlm": dt.rnnlm_batch_sizes,
        "tagger": dt.tagger_batch_sizes,
        "treelstm": dt.treelstm_batch_sizes,
    }
    cells = []
    for task in dt.tasks:
        if task not in TASK_UNITS:
            raise ValueError(
                f"bench.dynet_tasks.tasks: unknown {task!r}; one of {list(TASK_UNITS)}"
            )
        for mb in sizes[task]:
            cells.append(Cell(f"dynet_tasks {task} mb={mb}", _runner(bench, env, task, mb, seed)))
    return cells


def _runner(bench: Any, env: Env, task: str, mb: int, seed: int) -> Callable[[], list[Record]]:
    dt = bench.dynet_tasks

    def run() -> list[Record]:
        torch.manual_seed(seed)
        data, lengths = _data(task, dt.sentences, seed)
        items = sum(lengths) if TASK_UNITS[task] == "words" else len(data)
        with _threads(dt.threads) as threads:
            model = _model(task).to(env.device)
            opt = torch.optim.Adam(model.parameters(), lr=0.001)

            def step(sw: Stopwatch) -> None:
                with sw(task):
                    for i in range(0, len(data), mb):
                        opt.zero_grad(set_to_none=True)
                        model.loss(data[i : i + mb]).backward()
                        opt.step()

            records = run_interleaved(
                [Case(task, step)], env.device, bench.warmup, bench.repeats, bench.budget_s,
                bench.min_repeats,
            )  # fmt: skip
        key = f"{task}_mb{mb}" if task == "rnnlm" else task
        for r in records:
            r.update(
                experiment="dynet_tasks",
                mode="training",
                column=key,
                batch_size=mb,
                items=items,
                unit=TASK_UNITS[task],
                threads=threads,
                state_size=DYNET_TASKS[task]["hidden"],
            )
        return records

    return run
