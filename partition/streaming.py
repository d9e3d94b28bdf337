"""Streaming partitioners (LDG and Fennel): one pass over the nodes, memory O(edges of a batch).

For graphs METIS cannot hold: each node goes to the part that holds most of
its already-placed neighbours, discounted by how full that part is (LDG:
multiply by 1 - load / capacity; Fennel: subtract alpha * gamma * load^(gamma-1)).
Nodes are streamed in batches, in a seeded random order; a batch sees the
parts of every node placed before it (batches are small next to a part, so
this is close to one-at-a-time). Further passes (restreaming) see every
node's part from the previous pass and usually cut fewer edges.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from partition.errors import PartitionError


def stream_parts(adj: sp.csr_matrix, num_parts: int, method: str = "fennel", seed: int = 0, passes: int = 1,
                 batch: int | None = None, slack: float = 0.05) -> np.ndarray:
    """`adj`: symmetric CSR (who neighbours whom). Returns int32 part ids, every part non-empty."""
    if method not in ("ldg", "fennel"):
        raise PartitionError(f"unknown streaming method '{method}' (choose ldg or fennel)")
    n = adj.shape[0]
    if num_parts < 1 or num_parts > n:
        raise PartitionError(f"--parts must be between 1 and the number of nodes ({n}), got {num_parts}")
    rng = np.random.default_rng([seed, 0x57AE])
    order = rng.permutation(n)
    batch = batch or max(1, min(4096, n // (64 * num_parts)))
    capacity = (1.0 + slack) * n / num_parts
    m = adj.nnz / 2
    gamma = 1.5
    alpha = np.sqrt(num_parts) * m / max(n, 1) ** gamma
    parts = np.full(n, -1, np.int64)
    for _ in range(max(passes, 1)):
        previous = parts.copy()
        load = np.zeros(num_parts) if (previous < 0).all() else np.bincount(previous, minlength=num_parts).astype(float)
        for lo in range(0, n, batch):
            nodes = order[lo:lo + batch]
            sub = adj[nodes]
            row = np.repeat(np.arange(nodes.shape[0]), np.diff(sub.indptr))
            p = parts[sub.indices]
            ok = p >= 0
            counts = np.bincount(row[ok] * num_parts + p[ok], minlength=nodes.shape[0] * num_parts)
            counts = counts.reshape(nodes.shape[0], num_parts).astype(float)
            if (previous >= 0).any():  # restreaming: this batch leaves its old parts first
                np.subtract.at(load, previous[nodes], 1.0)
            if method == "ldg":
                score = counts * (1.0 - load / capacity)[None, :] + 1e-9 * (capacity - load)[None, :]
            else:
                score = counts - alpha * gamma * np.power(np.maximum(load, 0.0), gamma - 1.0)[None, :]
            full = load >= capacity
            score[:, full] = -np.inf
            choice = np.argmax(score, axis=1)
            parts[nodes] = choice
            np.add.at(load, choice, 1.0)
    counts = np.bincount(parts, minlength=num_parts)
    if (counts == 0).any():
        raise PartitionError(f"streaming left part {int(np.argmin(counts))} empty; use fewer parts")
    return parts.astype(np.int32)
