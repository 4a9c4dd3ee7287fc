"""Ranking scores of binary predictions, in numpy: ROC AUC and average precision.

Both need every prediction of a split at once, so a model reports its per-example probabilities
and labels from ``forward`` (tensors with a leading example axis, concatenated over an epoch by
the trainer) and computes these in ``summarize``. They agree with scikit-learn's
``roc_auc_score`` and ``average_precision_score`` (ties included), without depending on it.
"""

from __future__ import annotations

import numpy as np

__all__ = ["average_precision", "roc_auc", "two_classes"]


def _check(labels: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    y = np.asarray(labels, dtype=np.float64).reshape(-1)
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    if y.shape != s.shape:
        raise ValueError(f"labels and scores differ in length: {y.shape[0]} and {s.shape[0]}")
    if not np.isin(y, (0.0, 1.0)).all():
        raise ValueError("labels must be 0 or 1")
    return y, s


def two_classes(labels: np.ndarray) -> bool:
    """Whether ``labels`` hold both a 0 and a 1 (else neither score is defined)."""
    y = np.asarray(labels).reshape(-1)
    return bool((y == 1).any() and (y == 0).any())


def _average_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks of ``values``; tied values share the mean of their ranks."""
    order = np.argsort(values, kind="mergesort")
    ordered = values[order]
    # Start of each run of equal values, and the mean rank of the run.
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    ends = np.r_[starts[1:], len(values)]
    run_rank = (starts + 1 + ends) / 2.0  # mean of starts+1 .. ends
    ranks = np.empty(len(values), dtype=np.float64)
    ranks[order] = np.repeat(run_rank, ends - starts)
    return ranks


def roc_auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Area under the ROC curve: the probability that a random positive scores above a random
    negative, a tie counting one half (the Mann-Whitney U statistic over both class sizes).

    Raises:
        ValueError: The labels are not all 0/1 or hold one class only (no curve exists).
    """
    y, s = _check(labels, scores)
    if not two_classes(y):
        raise ValueError("ROC AUC needs both classes among the labels")
    ranks = _average_ranks(s)
    positives = y == 1
    n_pos, n_neg = int(positives.sum()), int((~positives).sum())
    u = ranks[positives].sum() - n_pos * (n_pos + 1) / 2.0
    return float(u / (n_pos * n_neg))


def average_precision(labels: np.ndarray, scores: np.ndarray) -> float:
    """Average precision: the precision at each distinct score threshold, from the highest down,
    weighted by the recall it adds (``sum_k (R_k - R_{k-1}) P_k``; tied scores are one
    threshold). The area under the precision-recall curve without interpolation.

    Raises:
        ValueError: The labels are not all 0/1 or hold no positive.
    """
    y, s = _check(labels, scores)
    if not (y == 1).any():
        raise ValueError("average precision needs at least one positive label")
    order = np.argsort(-s, kind="mergesort")
    s, y = s[order], y[order]
    last_of_threshold = np.r_[np.flatnonzero(s[1:] != s[:-1]), len(s) - 1]
    true_pos = np.cumsum(y)[last_of_threshold]
    predicted = last_of_threshold + 1.0
    precision = true_pos / predicted
    recall = true_pos / true_pos[-1]
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))
