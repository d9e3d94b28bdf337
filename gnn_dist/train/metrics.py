"""Scores that need every rank's rows at once: ROC-AUC, as OGB's evaluator computes it.

Accuracy and micro-F1 are sums of counts, so ranks add them up (`NodeTask`).
ROC-AUC ranks every score of a task against every other, so each rank holds
the split's scores and labels of all ranks; they are few next to the graph.
"""
from __future__ import annotations

import numpy as np


def roc_auc(truth: np.ndarray, scores: np.ndarray) -> float:
    """Mean over tasks (columns) that have both a positive and a negative of the ROC-AUC, ties counted
    half (the Mann-Whitney statistic; what sklearn's roc_auc_score and so OGB's evaluator give); NaN if no
    task qualifies. truth: 0/1 (NaN marks an unlabelled entry), scores: any monotone score, e.g. logits."""
    truth, scores = np.atleast_2d(np.asarray(truth, np.float64).T).T, np.atleast_2d(np.asarray(scores, np.float64).T).T
    aucs = []
    for t in range(truth.shape[1]):
        known = ~np.isnan(truth[:, t])
        y, s = truth[known, t] > 0.5, scores[known, t]
        pos, neg = int(y.sum()), int((~y).sum())
        if pos and neg:
            aucs.append((average_ranks(s)[y].sum() - pos * (pos + 1) / 2) / (pos * neg))
    return float(np.mean(aucs)) if aucs else float("nan")


def average_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks, ties given their mean rank (scipy.stats.rankdata's default; importing scipy.stats would
    cost every rank about 60 MB)."""
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    first = np.r_[True, ordered[1:] != ordered[:-1]]  # where each run of equal values starts
    starts = np.flatnonzero(first)
    ends = np.r_[starts[1:], len(values)]
    ranks = np.empty(len(values))
    ranks[order] = ((starts + ends + 1) / 2.0)[np.cumsum(first) - 1]
    return ranks
