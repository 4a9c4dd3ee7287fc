"""The binary Tree-LSTM (Tai et al. 2015) assembled from blocks, as the paper's §3.5 shapes it.

``binary_tree`` is the recursion over nested tuples -- a leaf is ``(word_id,)``, an internal node
``(left, right)`` -- so ``OneOf(key_fn=len, ...)`` dispatches on arity exactly as the paper writes
it; ``binary_tree_lstm`` / ``tree_lstm_classifier`` put the cells of ``cells.py`` in it for the
engine's benchmarks and tests, and the bench peers reuse it with their own modules.

``TreeLSTMClassifier`` is the trainable model over labelled ``foldexp.data.trees.Tree``s (SST,
calculator trees): every node records its hidden state and label through ``Metric`` blocks, so
the loss covers every labelled node; its accuracies are in ``tree_accuracy.py``. The child-sum
Tree-LSTM (``child_sum.py``, any number of children) reuses it with other cells. A node with one
child or more than two is refused, naming the input (``foldexp.experiments.tree_data`` names the
file and line of such a dataset before training).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import foldexp.blocks as fb
from foldexp.compiler.schedule import Plan
from foldexp.executor.compiled import Compiler
from foldexp.kernels import Dropout, Linear
from foldexp.models import tree_accuracy
from foldexp.models.cells import BinaryTreeLSTMCell, TreeLSTMLeaf, WordTreeLSTMCell
from foldexp.models.contract import TrainingSetup
from foldexp.models.distill import prepare_distillation
from foldexp.models.tree_accuracy import Polarity, check_class_names, check_polarity

__all__ = [
    "binary_tree",
    "binary_tree_lstm",
    "tree_lstm_classifier",
    "random_tree",
    "record_node",
    "word_leaf",
    "TreeLSTMClassifier",
    "TreeBatch",
    "TreeShape",
]


def binary_tree(leaf: fb.Block, cell: nn.Module) -> fb.Block:
    """A nested-tuple tree → its root's state: ``leaf`` reads a leaf ``(word_id,)``, ``cell``
    combines the states of a pair ``(left, right)``."""
    tree = fb.ForwardDeclaration(name="tree")
    pair = fb.AllOf(fb.GetItem(0) >> tree(), fb.GetItem(1) >> tree()) >> fb.Function(cell)
    tree.resolve_to(fb.OneOf(key_fn=len, case_blocks=[(1, leaf), (2, pair)]))
    return tree()


def word_leaf(embedding: nn.Module, leaf_cell: nn.Module) -> fb.Block:
    """A leaf ``(word_id,)`` → ``leaf_cell`` of the word's embedding."""
    return fb.GetItem(0) >> fb.Scalar("int64") >> fb.Function(embedding) >> fb.Function(leaf_cell)


def binary_tree_lstm(
    vocab_size: int, embed_size: int, hidden_size: int, embedding: nn.Module | None = None
) -> fb.Block:
    """A block from a nested-tuple tree to its root state ``(h, c)``."""
    embed = embedding if embedding is not None else fb.Embedding(vocab_size, embed_size)
    leaf_cell = TreeLSTMLeaf(embed_size, hidden_size)
    cell = BinaryTreeLSTMCell(hidden_size)
    return binary_tree(word_leaf(embed, leaf_cell), cell)


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
        freeze_embeddings: keep ``embeddings`` fixed.
        node_loss: train on every labelled node (else the root only).
        embedding_lr, embedding_weight_decay: the word table's own optimizer settings
            (``None``: the optimizer's); see ``param_groups``.
        embedding_optimizer: ``"sgd"`` updates the word table with plain SGD (Tai et al.
            2015) at ``embedding_lr``; ``None``: with the main optimizer.
        recurrent_dropout: dropout on each cell's candidate update (Semeniuta et al. 2016), as
            the Fold paper's Tree-LSTM (§3.5.1); ``forget_bias`` starts the forget gates there.
        internal_words: internal nodes have a word of their own (calculator operators).
        predict_classes: predictions and accuracies use only the first ``predict_classes``
            classes (``None``: all); the rest are trained but never predicted.
        polarity: ``(negative classes, positive classes)`` of a graded label set (SST's fine
            view: ``([0, 1], [3, 4])``): adds ``binary_accuracy`` and ``binary_node_accuracy``
            (``tree_accuracy.py``).
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
        name: the display name in results (the config's ``model.name``).
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
        polarity: Polarity | None = None,
        teacher: list[str] | str | None = None,
        distill_weight: float = 0.5,
        class_names: list[str] | None = None,
        non_binary_tree: str | None = None,
        name: str = "tree_lstm",
    ) -> None:
        super().__init__()
        _refuse_non_binary(non_binary_tree)
        if embeddings is not None:
            embed_size = int(embeddings.shape[1])
        self.vocab, self.num_classes, self.node_loss = vocab, num_classes, node_loss
        self.predict_classes = _check_predict_classes(predict_classes, num_classes)
        self.class_names = check_class_names(class_names, num_classes)
        self.polarity = check_polarity(polarity, num_classes)
        self.teacher, self.distill_weight = teacher, distill_weight
        self._soft_targets: Mapping[Any, np.ndarray] = {}  # filled by set_soft_targets
        self._no_target = np.zeros(num_classes, dtype=np.float32)
        frozen = freeze_embeddings and embeddings is not None
        table = fb.Embedding(len(vocab), embed_size, initializer=embeddings, trainable=not frozen)
        word = _word(vocab, table, dropout if embedding_dropout is None else embedding_dropout)
        shape = TreeShape(embed_size, hidden_size, recurrent_dropout, forget_bias, internal_words)
        # Trees are immutable and recur every epoch: trace each once, re-batch it afterwards.
        self.compiler = Compiler(self._tree_block(word, shape) >> fb.GetItem(0), cache_traces=True)
        self.dropout = Dropout(dropout)
        self.classify = Linear(hidden_size, num_classes)
        self.embedding = table
        self.embedding_lr, self.embedding_weight_decay = embedding_lr, embedding_weight_decay
        self.embedding_optimizer = embedding_optimizer

    def _tree_block(self, word: fb.Block, shape: TreeShape) -> fb.Block:
        """The recursion from a ``Tree`` to its root state ``(h, c)``, every node recorded (a
        subclass builds its own cells here); ``word`` maps a node to its word vector."""
        tree = fb.ForwardDeclaration(name="tree")
        children = fb.InputTransform(_children) >> fb.Record((tree(), tree()))
        if shape.internal_words:
            cell: nn.Module = WordTreeLSTMCell(
                shape.embed_size, shape.hidden_size, shape.recurrent_dropout, shape.forget_bias
            )
            internal = fb.AllOf(word, children) >> fb.Function(cell)
        else:
            cell = BinaryTreeLSTMCell(shape.hidden_size, shape.recurrent_dropout, shape.forget_bias)
            internal = children >> fb.Function(cell)
        leaf_cell = TreeLSTMLeaf(shape.embed_size, shape.hidden_size, shape.recurrent_dropout)
        leaf = word >> fb.Function(leaf_cell)
        state = fb.OneOf(_binary_arity, {0: leaf, 2: internal})
        tree.resolve_to(self._record(state, fb.Identity()))
        return tree()

    def _record(self, state: fb.Block, tree: fb.Block) -> fb.Block:
        """``state`` recording the node's ``h``, label and, when distilling, soft target."""
        soft = self._soft_target if self.teacher else None
        return record_node(state, tree, soft, self.num_classes)

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
            emb["optimizer"] = opt  # a plain string (train.build converts enums); see train.optim
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
        root_labels = batch.root_labels.to(root_logits.device)
        if self.node_loss:
            loss = self._node_loss(node_logits, node_labels) / max(1, batch.size)
        else:  # the mean over labelled roots (``_node_loss`` says why no mask indexes)
            loss = F.cross_entropy(root_logits, root_labels.clamp(min=-1), ignore_index=-1)
        stats = {"loss": loss}
        stats.update(self._hits("root", root_logits, root_labels))
        stats.update(self._hits("node", node_logits, node_labels))
        return stats

    def _node_loss(self, node_logits: torch.Tensor, node_labels: torch.Tensor) -> torch.Tensor:
        """Summed cross-entropy over labelled nodes, mixed with the soft targets' when
        distilling."""
        # Unlabelled nodes (label < 0) weigh nothing rather than being indexed out: indexing by
        # a boolean mask makes the host wait for a GPU to count the rows.
        labels = node_labels.clamp(min=-1)
        loss = F.cross_entropy(node_logits, labels, ignore_index=-1, reduction="sum")
        if self.teacher and self.training and self._soft_targets:
            soft, _ = self.compiler.last_metrics["soft"]
            soft = torch.where((labels >= 0)[:, None], soft, 0.0)
            soft_loss = -(soft * node_logits.log_softmax(1)).sum()
            loss = (1 - self.distill_weight) * loss + self.distill_weight * soft_loss
        return loss

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
        return tree_accuracy.hits(where, scores, labels, self.predict_classes, self.polarity, probs)

    @staticmethod
    def summarize(sums: dict[str, float]) -> dict[str, float]:
        """Metrics from summed statistics (``tree_accuracy.summarize``): accuracy at the root and
        over all labelled nodes, and their binary forms when the model has a ``polarity``."""
        return tree_accuracy.summarize(sums)


@dataclass(frozen=True)
class TreeShape:
    """The sizes and cell options ``_tree_block`` builds from."""

    embed_size: int
    hidden_size: int
    recurrent_dropout: float
    forget_bias: float
    internal_words: bool


def _word(vocab: Any, embedding: fb.Embedding, dropout: float) -> fb.Block:
    """A ``Tree`` node → its word's vector, with ``dropout``."""
    index = vocab.index
    word_id = fb.InputTransform(lambda node: index(node.word)) >> fb.Scalar("int64")
    return word_id >> fb.Function(embedding) >> fb.Function(Dropout(dropout))


def record_node(state: fb.Block, tree: fb.Block, soft: Any = None, classes: int = 0) -> fb.Block:
    """A node's state, recording it (``h``) and the Python node's label (``label``) as metrics,
    so the loss reads every node; ``tree`` yields the Python node. With ``soft`` (node → class
    probabilities) the node's soft target is recorded too (``soft``, ``classes`` wide)."""
    records = [tree >> fb.InputTransform(_label) >> fb.Scalar("int64") >> fb.Metric("label")]
    if soft is not None:
        records.append(tree >> fb.InputTransform(soft) >> fb.Vector(classes) >> fb.Metric("soft"))
    return (
        fb.AllOf(state >> fb.AllOf(fb.Identity(), fb.GetItem(0) >> fb.Metric("h")), *records)
        >> fb.GetItem(0)
        >> fb.GetItem(0)
    )


def _label(node: Any) -> int:
    return node.label


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


def _refuse_non_binary(non_binary_tree: str | None) -> None:
    if non_binary_tree:
        raise ValueError(
            f"model tree_lstm combines exactly two children per node, but {non_binary_tree}; "
            "train model=child_sum_tree_lstm instead (any number of children)"
        )


def _check_predict_classes(predict_classes: int | None, num_classes: int) -> int:
    """The number of predicted classes: ``predict_classes`` in ``2..num_classes``, or all."""
    if predict_classes is not None and not 2 <= predict_classes <= num_classes:
        raise ValueError(f"predict_classes={predict_classes}; expected 2..{num_classes}")
    return predict_classes or num_classes
