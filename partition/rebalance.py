"""Extra balance constraints by node swaps after METIS.

pymetis exposes METIS with a single vertex weight (ncon = 1; its multi-
constraint PR is unmerged), so each extra constraint (train nodes, degree,
node types) is enforced here: swap a heavy node of the most loaded part with
a light node of the least loaded one, best cut gain first. A swap keeps every
part's node count, so the first constraint METIS balanced stays balanced.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def _gains(adj: sp.csr_matrix, parts: np.ndarray, nodes: np.ndarray, own: int, other: int) -> np.ndarray:
    """Edges into `other` minus edges into `own` for each node: how much a move to `other` cuts less."""
    sub = adj[nodes]
    to_other = np.asarray(sub.multiply((parts == other)[None, :]).sum(axis=1)).ravel()
    to_own = np.asarray(sub.multiply((parts == own)[None, :]).sum(axis=1)).ravel()
    return to_other - to_own


def rebalance(adj: sp.csr_matrix, parts: np.ndarray, weights: np.ndarray, num_parts: int,
              tol: float = 0.05, max_rounds: int = 200, passes: int = 3) -> np.ndarray:
    """Bring every column of `weights` (n x c) within `tol` of its mean per part, by pairwise swaps."""
    parts = parts.copy()
    weights = np.asarray(weights, dtype=np.float64).reshape(parts.shape[0], -1)
    for _ in range(passes):
        settled = True
        for col in range(weights.shape[1]):
            w = weights[:, col]
            for _ in range(max_rounds):
                load = np.bincount(parts, weights=w, minlength=num_parts)
                mean = load.mean()
                h, lo = int(np.argmax(load)), int(np.argmin(load))
                if load[h] <= (1 + tol) * mean + 1:
                    break
                settled = False
                excess = min(load[h] - mean, mean - load[lo])
                heavy = np.flatnonzero(parts == h)
                light = np.flatnonzero(parts == lo)
                heavy = heavy[w[heavy] > 0]
                if heavy.size == 0 or light.size == 0:
                    break
                heavy = heavy[np.lexsort((-w[heavy], -_gains(adj, parts, heavy, h, lo)))]
                light = light[np.lexsort((w[light], -_gains(adj, parts, light, lo, h)))]
                k = min(heavy.size, light.size)
                diff = w[heavy[:k]] - w[light[:k]]
                take = (diff > 0) & (np.cumsum(np.maximum(diff, 0)) <= excess)
                if not take.any():
                    take[np.argmax(diff > 0)] = diff.max() > 0
                    if not take.any():
                        break
                parts[heavy[:k][take]] = lo
                parts[light[:k][take]] = h
        if settled:
            break
    return parts
