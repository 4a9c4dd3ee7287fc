"""Tree-LSTM models assembled from blocks (the paper's §3.5 shape).

``binary_tree_lstm`` / ``tree_lstm_classifier`` work on nested tuples — a leaf is
``(word_id,)``, an internal node ``(left, right)`` — so ``OneOf(key_fn=len, ...)`` dispatches on
arity exactly as the paper writes it; the engine benchmark and tests use them.

``TreeLSTMClassifier`` is the trainable model over labelled ``foldexp.data.trees.Tree``s (SST,
calculator trees): a loss on every labelled node, read out through ``Metric`` blocks. Its word
lookup and per-node recording are in ``tree_parts.py``, its leaf LSTM in ``tree_context.py``; the
child-sum Tree-LSTM (``child_sum.py``, any number of children) reuses it with other cells. A node
with one child or more than two is refused, naming the input (``foldexp.experiments.tree_data``
names the file and line of such a dataset before training).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import foldexp.blocks as fb
from foldexp.compiler.schedule import Plan
from foldexp.executor.compiled import Compiler
from foldexp.kernels import Linear
from foldexp.models.cells import BinaryTreeLSTMCell, TreeLSTMLeaf
from foldexp.models.contract import TrainingSetup
from foldexp.models.distill import prepare_distillation
from foldexp.models.tree_context import LSTMStep, contextual_tree
from foldexp.models.tree_parts import WordTreeLSTMCell, record_node, word_block

__all__ = [
    "binary_tree_lstm",
    "tree_lstm_classifier",
    "random_tree",
    "TreeLSTMClassifier",
    "TreeBatch",
    "TreeShape",
]


def binary_tree_lstm(
    vocab_size: int, embed_size: int, hidden_size: int, embedding: nn.Module | None = None
) -> fb.Block:
    """A block from a nested-tuple tree to its root state ``(h, c)``."""
    embed = embedding if embedding is not None else fb.Embedding(vocab_size, embed_size)
    leaf_cell = TreeLSTMLeaf(embed_size, hidden_size)
    cell = BinaryTreeLSTMCell(hidden_size)
    tree = fb.ForwardDeclaration(name="tree")
    word = fb.GetItem(0) >> fb.Scalar("int64") >> fb.Function(embed) >> fb.Function(leaf_cell)
    pair = fb.AllOf(fb.GetItem(0) >> tree(), fb.GetItem(1) >> tree()) >> fb.Function(cell)
    tree.resolve_to(fb.OneOf(key_fn=len, case_blocks=[(1, word), (2, pair)]))
    return tree()


def tree_lstm_classifier(
    vocab_size: int, embed_size: int, hidden_size: int, num_classes: int
) -> fb.Block:
    """Nested-tuple tree → logits over ``num_classes`` from the root's hidden state."""
    return (
        binary_tree_lstm(vocab_size, embed_size, hidden_size)
        >> fb.GetItem(0)
        >> fb.Function(Linear(hidden_size, num_classes))
    )


def random_tree(n_leaves: int, vocab_size: int, rng: Any) -> tuple:
    """A uniformly random binary tree shape with ``n_leaves`` leaves (nested tuples)."""
    if n_leaves == 1:
        return (int(rng.integers(vocab_size)),)
    k = int(rng.integers(1, n_leaves))
    return (random_tree(k, vocab_size, rng), random_tree(n_leaves - k, vocab_size, rng))


@dataclass
class TreeBatch:
    """A collated batch: the schedule (built off the main process) and the root labels."""

    plan: Plan
    root_labels: torch.Tensor
    size: int


class TreeLSTMClassifier(nn.Module):
    """Binary Tree-LSTM sentiment/expression classifier with a loss on every labelled node.

    Args:
        vocab: maps leaf words (and operator words) to ids (``foldexp.data.vocab.Vocabulary``).
        num_classes: label classes; a node labelled ``-1`` carries no label.
        embed_size, hidden_size: sizes; ``embeddings`` (a matrix) overrides ``embed_size``.
        dropout: on word embeddings and on the states fed to the classifier.
        embedding_dropout: on word embeddings instead (``None``: ``dropout``).
        internal_words: internal nodes have a word of their own (calculator operators).
        node_loss: train on every labelled node (else the root only).
        embedding_lr, embedding_weight_decay: the word table's own optimizer settings
            (``None``: the optimizer's); see ``param_groups``.
        embedding_optimizer: ``"sgd"`` updates the word table with plain SGD (Tai et al.
            2015) at ``embedding_lr``; ``None``: with the main optimizer.
        recurrent_dropout: dropout on each cell's candidate update (Semeniuta et al. 2016), as
            the Fold paper's Tree-LSTM (§3.5.1); ``forget_bias`` starts the forget gates there.
        predict_classes: predictions and accuracies use only the first ``predict_classes``
            classes (``None``: all); the rest are trained but never predicted, like the neutral
            class of Tai et al.'s binary model. Nodes labelled with them count in no accuracy.
        polarity: ``(negative classes, positive classes)`` of a graded label set (SST's fine
            view: ``([0, 1], [3, 4])``). Adds ``binary_accuracy`` and ``binary_node_accuracy``:
            over nodes labelled in either group, the prediction is the group with the larger
            summed probability, as TF Fold's sentiment model scores binary sentiment.
        word_dropout: while training, each word becomes ``<unk>`` with this probability.
        root_loss_weight: each root's cross-entropy counts ``1 + root_loss_weight`` times.
        leaf_context_size: > 0 puts a bidirectional LSTM of this size per direction over the
            sentence under the leaves (``tree_context.py``); not with ``internal_words``.
        static_vectors: words also read a frozen copy of ``embeddings`` (two channels).
        label_smoothing: the training loss's targets mix in this share of the uniform
            distribution; evaluation losses are plain cross-entropy.
        teacher: run or sweep folders whose models teach this one (knowledge distillation,
            Hinton et al. 2015): the trainer computes their averaged class probabilities at
            every training node (``foldexp.models.distill``) and hands them to
            ``set_soft_targets``; the training loss is then ``distill_weight`` times the
            cross-entropy against them plus the rest times the usual one.
        class_names: one name per class (default ``"0"``, ``"1"``, ...); ``prediction_columns``
            names the predicted classes' probabilities after them.
        non_binary_tree: from the dataset (``foldexp.experiments.tree_data``): where its first tree
            that is not binary is (``FILE:LINE: ...``), or ``None``. This model combines exactly
            two children, so such a dataset is refused here, before any training.
    """

    def __init__(
        self,
        vocab: Any,
        num_classes: int,
        embed_size: int = 64,
        hidden_size: int = 64,
        dropout: float = 0.0,
        embedding_dropout: float | None = None,
        freeze_embeddings: bool = False,
        node_loss: bool = True,
        embedding_lr: float | None = None,
        embedding_weight_decay: float | None = None,
        embedding_optimizer: str | None = None,
        recurrent_dropout: float = 0.0,
        forget_bias: float = 0.0,
        internal_words: bool = False,
        embeddings: np.ndarray | None = None,
        predict_classes: int | None = None,
        polarity: tuple[list[int], list[int]] | None = None,
        word_dropout: float = 0.0,
        root_loss_weight: float = 0.0,
        leaf_context_size: int = 0,
        static_vectors: bool = False,
        label_smoothing: float = 0.0,
        teacher: list[str] | str | None = None,
        distill_weight: float = 0.5,
        class_names: list[str] | None = None,
        non_binary_tree: str | None = None,
        name: str = "tree_lstm",
    ) -> None:
        super().__init__()
        self._refuse_non_binary(non_binary_tree)
        if embeddings is not None:
            embed_size = int(embeddings.shape[1])
        self.vocab, self.num_classes, self.node_loss = vocab, num_classes, node_loss
        if predict_classes is not None and not 2 <= predict_classes <= num_classes:
            raise ValueError(f"predict_classes={predict_classes}; expected 2..{num_classes}")
        self.predict_classes = predict_classes or num_classes
        self.class_names = _class_names(class_names, num_classes)
        self.polarity = _check_polarity(polarity, num_classes)
        if root_loss_weight < 0 or leaf_context_size < 0:
            raise ValueError(
                f"root_loss_weight={root_loss_weight}, leaf_context_size={leaf_context_size}; "
                "expected >= 0 (0: off)"
            )
        if leaf_context_size and internal_words:
            raise ValueError("leaf_context_size: not available with internal_words")
        if static_vectors and embeddings is None:
            raise ValueError("static_vectors: needs pretrained vectors (dataset.word_vectors)")
        embedding = fb.Embedding(
            len(vocab),
            embed_size,
            initializer=embeddings,
            trainable=not (freeze_embeddings and embeddings is not None),
        )
        word, embed_size = word_block(
            vocab,
            embedding,
            embeddings if static_vectors else None,
            word_dropout,
            dropout if embedding_dropout is None else embedding_dropout,
        )
        # Distillation (``teacher``): every node also records its soft target, which the trainer
        # fills in with ``set_soft_targets`` before training.
        self.teacher, self.distill_weight = teacher, distill_weight
        self._soft_targets: Mapping[Any, np.ndarray] = {}
        self._no_target = np.zeros(num_classes, dtype=np.float32)

        def node(state: fb.Block, tree: fb.Block) -> fb.Block:
            soft = self._soft_target if teacher else None
            return record_node(state, tree, soft, num_classes)

        shape = TreeShape(embed_size, hidden_size, recurrent_dropout, forget_bias, internal_words)
        root = self._tree_block(word, shape, leaf_context_size, node)
        # Trees are immutable and recur every epoch: trace each once, re-batch it afterwards.
        self.compiler = Compiler(root >> fb.GetItem(0), cache_traces=True)
        self.dropout = nn.Dropout(dropout)
        self.classify = Linear(hidden_size, num_classes)
        self.embedding = embedding
        self.embedding_lr, self.embedding_weight_decay = embedding_lr, embedding_weight_decay
        self.embedding_optimizer = embedding_optimizer
        self.root_loss_weight = root_loss_weight
        self.label_smoothing = label_smoothing

    @staticmethod
    def _refuse_non_binary(non_binary_tree: str | None) -> None:
        if non_binary_tree:
            raise ValueError(
                f"model tree_lstm combines exactly two children per node, but {non_binary_tree}; "
                "train model=child_sum_tree_lstm instead (any number of children)"
            )

    def _tree_block(
        self,
        word: fb.Block,
        shape: TreeShape,
        leaf_context_size: int,
        node: Callable[[fb.Block, fb.Block], fb.Block],
    ) -> fb.Block:
        """The recursion from a ``Tree`` to its root state ``(h, c)``, every node recorded by
        ``node`` (a subclass builds its own cells here)."""
        embed_size, hidden_size = shape.embed_size, shape.hidden_size
        recurrent_dropout, forget_bias = shape.recurrent_dropout, shape.forget_bias
        leaf_input = 2 * leaf_context_size or embed_size
        if leaf_context_size:
            cell = BinaryTreeLSTMCell(hidden_size, recurrent_dropout, forget_bias)
            leaf_cell = TreeLSTMLeaf(leaf_input, hidden_size, recurrent_dropout)
            # Kept outside the module registry (a tuple): the blocks already own them.
            self.leaf_context_steps = (
                LSTMStep(embed_size, leaf_context_size),
                LSTMStep(embed_size, leaf_context_size),
            )
            return contextual_tree(word, self.leaf_context_steps, leaf_cell, cell, node)
        tree = fb.ForwardDeclaration(name="tree")
        children = fb.InputTransform(_children) >> fb.Record((tree(), tree()))
        if shape.internal_words:
            internal = fb.AllOf(word, children) >> fb.Function(
                WordTreeLSTMCell(embed_size, hidden_size)
            )
        else:
            cell = BinaryTreeLSTMCell(hidden_size, recurrent_dropout, forget_bias)
            internal = children >> fb.Function(cell)
        leaf = word >> fb.Function(TreeLSTMLeaf(leaf_input, hidden_size, recurrent_dropout))
        state = fb.OneOf(_binary_arity, {0: leaf, 2: internal})
        tree.resolve_to(node(state, fb.Identity()))
        return tree()

    def param_groups(self) -> list[dict[str, Any]]:
        """The word table apart from the rest, so it can learn at its own rate (Tai et al. 2015
        update embeddings apart from the network, with plain SGD); ``None`` values fall back to the
        optimizer's."""
        table = [self.embedding.weight]
        rest = [p for p in self.parameters() if p is not self.embedding.weight]
        emb: dict[str, Any] = {"params": table}
        if self.embedding_lr is not None:
            emb["lr"] = self.embedding_lr
        if self.embedding_weight_decay is not None:
            emb["weight_decay"] = self.embedding_weight_decay
        if self.embedding_optimizer:
            opt = self.embedding_optimizer
            emb["optimizer"] = str(getattr(opt, "value", opt))  # see foldexp.train.optim
        return [{"params": rest}, emb]

    def collate(self, trees: list[Any]) -> TreeBatch:
        """Traces and schedules a batch (safe to call in DataLoader workers)."""
        labels = torch.tensor([t.label for t in trees], dtype=torch.int64)
        return TreeBatch(self.compiler.build(trees), labels, len(trees))

    def forward(self, batch: TreeBatch) -> dict[str, torch.Tensor]:
        """Loss and summed statistics: root and all-node correct counts."""
        root_h = self.compiler.run(batch.plan)
        node_h, _ = self.compiler.last_metrics["h"]
        node_labels, _ = self.compiler.last_metrics["label"]
        root_logits = self.classify(self.dropout(root_h))
        node_logits = self.classify(self.dropout(node_h))
        mask = node_labels >= 0
        root_labels = batch.root_labels.to(root_logits.device)
        root_mask = root_labels >= 0
        if self.node_loss:
            smooth = self.label_smoothing if self.training else 0.0
            loss = F.cross_entropy(
                node_logits[mask], node_labels[mask], reduction="sum", label_smoothing=smooth
            )
            if self.teacher and self.training and self._soft_targets:
                soft, _ = self.compiler.last_metrics["soft"]
                log_p = node_logits[mask].log_softmax(1)
                soft_loss = -(soft[mask] * log_p).sum()
                loss = (1 - self.distill_weight) * loss + self.distill_weight * soft_loss
            if self.root_loss_weight and bool(root_mask.any()):
                loss = loss + self.root_loss_weight * F.cross_entropy(
                    root_logits[root_mask],
                    root_labels[root_mask],
                    reduction="sum",
                    label_smoothing=smooth,
                )
            loss = loss / max(1, batch.size)
        else:
            loss = F.cross_entropy(
                root_logits[root_mask],
                root_labels[root_mask],
                label_smoothing=self.label_smoothing if self.training else 0.0,
            )
        stats = {"loss": loss}
        stats.update(self._hits("root", root_logits, root_labels))
        stats.update(self._hits("node", node_logits, node_labels))
        return stats

    def prepare_training(self, setup: TrainingSetup) -> None:
        """The contract's hook: with ``teacher`` set, the teachers' soft targets (distillation)."""
        prepare_distillation(self, setup)

    def set_soft_targets(self, targets: Mapping[Any, np.ndarray]) -> None:
        """Each training node's soft target (class probabilities), keyed by the node: a node's
        prediction depends on its subtree alone, so equal subtrees share one key."""
        self._soft_targets = targets

    def _soft_target(self, node: Any) -> np.ndarray:
        return self._soft_targets.get(node, self._no_target)

    def node_probabilities(self, batch: TreeBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """Class probabilities and labels of every node, trees in batch order and each tree's
        nodes in post-order (``Tree.nodes()``); ``foldexp.models.distill`` averages them."""
        self.compiler.run(batch.plan)
        node_h, _ = self.compiler.last_metrics["h"]
        node_labels, _ = self.compiler.last_metrics["label"]
        return self.classify(self.dropout(node_h)).softmax(1), node_labels

    def root_probabilities(self, batch: TreeBatch) -> torch.Tensor:
        """Class probabilities at each tree's root, one row per tree (``foldexp ensemble``
        averages them over models)."""
        return self.classify(self.dropout(self.compiler.run(batch.plan))).softmax(1)

    def predict(self, batch: TreeBatch) -> torch.Tensor:
        """Class probabilities at each tree's root over the predicted classes (the first
        ``predict_classes``, renormalised), one row per tree (``foldexp predict``)."""
        logits = self.classify(self.dropout(self.compiler.run(batch.plan)))
        return logits[:, : self.predict_classes].softmax(1)

    def prediction_columns(self) -> list[str]:
        """``p_<class name>`` for each predicted class: the columns of ``predict``."""
        return [f"p_{name}" for name in self.class_names[: self.predict_classes]]

    def score_roots(self, probs: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        """Summed root hits and counts of class probabilities (``summarize`` turns them into
        ``accuracy`` and, with a ``polarity``, ``binary_accuracy``)."""
        return self._hits("root", probs, labels, probs=probs)

    def _hits(
        self,
        where: str,
        scores: torch.Tensor,
        labels: torch.Tensor,
        probs: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        """Correct predictions and counts over labelled nodes; ``scores`` are logits or
        probabilities (the argmax is the same), ``probs`` the probabilities (default: the
        softmax of ``scores``) for the binary hits."""
        # Classes past predict_classes are trained (they shape the states) but never predicted.
        scored = self.predict_classes
        pred = scores[:, :scored].argmax(1)
        counted = (labels >= 0) & (labels < scored)
        hits = {
            f"{where}_correct": (pred == labels)[counted].sum(),
            f"{where}_count": counted.sum(),
        }
        if self.polarity is not None:
            probs = scores.detach().softmax(1) if probs is None else probs
            hits.update(self._polar_hits(where, probs, labels))
        return hits

    def _polar_hits(self, where: str, probs: torch.Tensor, labels: torch.Tensor) -> dict:
        """Binary hits of a graded classifier over the nodes labelled negative or positive."""
        negative, positive = (torch.tensor(g, device=probs.device) for g in self.polarity)
        says_positive = probs[:, positive].sum(1) > probs[:, negative].sum(1)
        is_positive = torch.isin(labels, positive)
        polar = is_positive | torch.isin(labels, negative)
        return {
            f"{where}_binary_correct": (says_positive == is_positive)[polar].sum(),
            f"{where}_binary_count": polar.sum(),
        }

    @staticmethod
    def summarize(sums: dict[str, float]) -> dict[str, float]:
        """Metrics from summed statistics: accuracy at the root and over all labelled nodes
        (when ``sums`` has node counts; ``score_roots`` gives roots only), and their binary
        forms when the model has a ``polarity``."""

        def ratio(hits: str, count: str) -> float:
            return sums[hits] / max(1.0, sums[count])

        metrics = {"accuracy": ratio("root_correct", "root_count")}
        if "node_count" in sums:
            metrics["node_accuracy"] = ratio("node_correct", "node_count")
        if "root_binary_count" in sums:
            metrics["binary_accuracy"] = ratio("root_binary_correct", "root_binary_count")
        if "node_binary_count" in sums:
            metrics["binary_node_accuracy"] = ratio("node_binary_correct", "node_binary_count")
        return metrics


@dataclass(frozen=True)
class TreeShape:
    """The sizes and cell options ``_tree_block`` builds from."""

    embed_size: int
    hidden_size: int
    recurrent_dropout: float
    forget_bias: float
    internal_words: bool


def _children(node: Any) -> tuple:
    return node.children


def _binary_arity(node: Any) -> int:
    """A node's number of children, refusing any but 0 and 2 with a message a person can act
    on (the engine wraps it into an ``InputError`` naming the input)."""
    arity = len(node.children)
    if arity not in (0, 2):
        fix = "collapse_unary merges it" if arity == 1 else "model=child_sum_tree_lstm reads it"
        raise ValueError(
            f"model tree_lstm combines exactly two children per node, got a node with {arity} "
            f"({fix})"
        )
    return arity


def _class_names(names: list[str] | None, num_classes: int) -> list[str]:
    """``names`` as strings, one per class, or ``"0"``, ``"1"``, ... without them."""
    if names is None:
        return [str(k) for k in range(num_classes)]
    names = [str(n) for n in names]
    if len(names) != num_classes or len(set(names)) < len(names):
        raise ValueError(f"class_names={names}; expected {num_classes} distinct names")
    return names


def _check_polarity(
    polarity: tuple[list[int], list[int]] | None, num_classes: int
) -> tuple[list[int], list[int]] | None:
    """``polarity`` as two disjoint non-empty lists of class ids, or ``None``."""
    if polarity is None:
        return None
    negative, positive = (sorted(int(c) for c in group) for group in polarity)
    classes = negative + positive
    if not negative or not positive or len(set(classes)) < len(classes):
        raise ValueError(f"polarity={polarity}; expected two disjoint non-empty class lists")
    if not all(0 <= c < num_classes for c in classes):
        raise ValueError(f"polarity={polarity}; classes must be in 0..{num_classes - 1}")
    return negative, positive
