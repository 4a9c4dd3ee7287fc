"""Accuracy of a tree classifier at its roots and over all its labelled nodes.

A batch's ``hits`` are summed counts (the trainer adds them up over a split); ``summarize`` turns
the sums into metrics. Classes past ``predict_classes`` are trained but never predicted, like the
neutral class of Tai et al.'s binary model, and nodes labelled with them count in no accuracy. A
``polarity`` ``(negative classes, positive classes)`` of a graded label set adds binary hits: over
nodes labelled in either group, the prediction is the group with the larger summed probability,
as TF Fold's sentiment model scores binary sentiment.
"""

from __future__ import annotations

import torch

__all__ = ["Polarity", "check_class_names", "check_polarity", "hits", "summarize"]

Polarity = tuple[list[int], list[int]]


def hits(
    where: str,
    scores: torch.Tensor,
    labels: torch.Tensor,
    predict_classes: int,
    polarity: Polarity | None,
    probs: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """Correct predictions and counts over labelled nodes, keyed ``<where>_correct`` and
    ``<where>_count``; ``scores`` are logits or probabilities (the argmax is the same), ``probs``
    the probabilities (default: the softmax of ``scores``) for the binary hits."""
    pred = scores[:, :predict_classes].argmax(1)
    counted = (labels >= 0) & (labels < predict_classes)
    counts = {
        f"{where}_correct": ((pred == labels) & counted).sum(),  # no mask index: no GPU wait
        f"{where}_count": counted.sum(),
    }
    if polarity is not None:
        probs = scores.detach().softmax(1) if probs is None else probs
        counts.update(_polar_hits(where, probs, labels, polarity))
    return counts


def _polar_hits(
    where: str, probs: torch.Tensor, labels: torch.Tensor, polarity: Polarity
) -> dict[str, torch.Tensor]:
    """Binary hits of a graded classifier over the nodes labelled negative or positive."""
    negative, positive = (torch.tensor(g, device=probs.device) for g in polarity)
    says_positive = probs[:, positive].sum(1) > probs[:, negative].sum(1)
    is_positive = torch.isin(labels, positive)
    polar = is_positive | torch.isin(labels, negative)
    return {
        f"{where}_binary_correct": ((says_positive == is_positive) & polar).sum(),
        f"{where}_binary_count": polar.sum(),
    }


def summarize(sums: dict[str, float]) -> dict[str, float]:
    """Metrics from summed hits: ``accuracy`` at the root, ``node_accuracy`` over all labelled
    nodes (when ``sums`` has node counts), and their binary forms when there are binary hits."""

    def ratio(correct: str, count: str) -> float:
        return sums[correct] / max(1.0, sums[count])

    metrics = {"accuracy": ratio("root_correct", "root_count")}
    if "node_count" in sums:
        metrics["node_accuracy"] = ratio("node_correct", "node_count")
    if "root_binary_count" in sums:
        metrics["binary_accuracy"] = ratio("root_binary_correct", "root_binary_count")
    if "node_binary_count" in sums:
        metrics["binary_node_accuracy"] = ratio("node_binary_correct", "node_binary_count")
    return metrics


def check_class_names(names: list[str] | None, num_classes: int) -> list[str]:
    """``names`` as strings, one per class, or ``"0"``, ``"1"``, ... without them."""
    if names is None:
        return [str(k) for k in range(num_classes)]
    names = [str(n) for n in names]
    if len(names) != num_classes or len(set(names)) < len(names):
        raise ValueError(f"class_names={names}; expected {num_classes} distinct names")
    return names


def check_polarity(polarity: Polarity | None, num_classes: int) -> Polarity | None:
    """``polarity`` as two disjoint non-empty sorted lists of class ids, or ``None``."""
    if polarity is None:
        return None
    negative, positive = (sorted(int(c) for c in group) for group in polarity)
    classes = negative + positive
    if not negative or not positive or len(set(classes)) < len(classes):
        raise ValueError(f"polarity={polarity}; expected two disjoint non-empty class lists")
    if not all(0 <= c < num_classes for c in classes):
        raise ValueError(f"polarity={polarity}; classes must be in 0..{num_classes - 1}")
    return negative, positive
