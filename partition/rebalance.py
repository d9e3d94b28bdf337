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


def _fitting_pairs(diff: np.ndarray, excess: float) -> np.ndarray:
    """Pairs (in gain order) whose weight differences add up to at most `excess`; one that overflows is skipped,
    not the end of the list. Without any, the smallest difference, if moving it still lowers the heavier load."""
    take = np.zeros(diff.shape[0], bool)
    room = excess
    for i in np.flatnonzero(diff > 0):
        if diff[i] <= room:
            take[i] = True
            room -= diff[i]
    if not take.any() and (diff > 0).any():
        i = int(np.argmin(np.where(diff > 0, diff, np.inf)))
        take[i] = diff[i] < 2 * excess
    return take


def rebalance(adj: sp.csr_matrix, parts: np.ndarray, weights: np.ndarray, num_parts: int,
              tol: float = 0.05, max_rounds: int = 1000, passes: int = 3) -> np.ndarray:
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
                if load[h] <= (1 + tol) * mean:
                    break
                settled = False
                excess = min(load[h] - mean, mean - load[lo])
                heavy = np.flatnonzero(parts == h)
                light = np.flatnonzero(parts == lo)
                heavy = heavy[w[heavy] > 0]
                if heavy.size == 0 or light.size == 0:
                    break
                k = min(heavy.size, light.size)
                # pair the best cut gains first; where no such pair lowers the load any more, the heaviest
                # nodes with the lightest (hubs in skewed graphs would otherwise never move)
                for by_gain in (True, False):
                    if by_gain:
                        hs = heavy[np.lexsort((-w[heavy], -_gains(adj, parts, heavy, h, lo)))][:k]
                        ls = light[np.lexsort((w[light], -_gains(adj, parts, light, lo, h)))][:k]
                    else:
                        hs = heavy[np.argsort(-w[heavy], kind="stable")][:k]
                        ls = light[np.argsort(w[light], kind="stable")][:k]
                    take = _fitting_pairs(w[hs] - w[ls], excess)
                    if take.any():
                        break
                if not take.any():
                    break
                parts[hs[take]] = lo
                parts[ls[take]] = h
        if settled:
            break
    return parts
