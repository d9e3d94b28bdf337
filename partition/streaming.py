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

from typing import Callable

import numpy as np
import scipy.sparse as sp

from partition.errors import PartitionError


class LocalSync:
    """One process holds every node: nothing to merge."""

    def rounds(self, mine: int) -> int:
        return mine

    def merge(self, parts: np.ndarray, nodes: np.ndarray, choice: np.ndarray, delta: np.ndarray) -> np.ndarray:
        return delta


def default_batch(num_nodes: int, num_parts: int) -> int:
    return max(1, min(4096, num_nodes // (64 * num_parts)))


def stream_order(num_nodes: int, seed: int) -> np.ndarray:
    """The seeded visiting order; a rank of the MPI partitioner visits its own nodes in this order too."""
    return np.random.default_rng([seed, 0x57AE]).permutation(num_nodes)


def stream_rounds(rows_of: Callable[[np.ndarray], sp.csr_matrix], order: np.ndarray, parts: np.ndarray,
                  num_parts: int, num_nodes: int, num_pairs: float, method: str, passes: int, batch: int,
                  slack: float = 0.05, sync=None) -> np.ndarray:
    """Place `order`'s nodes batch by batch; `parts` (every node, -1 = unplaced) is updated in place.

    `rows_of(nodes)` gives those nodes' neighbour lists (global ids). `sync`
    merges each round's choices and load changes with other ranks (the MPI
    partitioner); alone, a LocalSync. Loads are global; within a round a rank
    sees only its own placements, so each round should be small next to a part.
    """
    if method not in ("ldg", "fennel"):
        raise PartitionError(f"unknown streaming method '{method}' (choose ldg or fennel)")
    sync = sync or LocalSync()
    capacity = (1.0 + slack) * num_nodes / num_parts
    gamma = 1.5
    alpha = np.sqrt(num_parts) * num_pairs / max(num_nodes, 1) ** gamma
    for _ in range(max(passes, 1)):
        previous = parts.copy()
        restream = bool((previous >= 0).any())
        # every rank holds every node's part, so this is the global load (zero on the first pass)
        load = np.bincount(previous[previous >= 0], minlength=num_parts).astype(float)
        for r in range(sync.rounds((order.shape[0] + batch - 1) // batch)):
            nodes = order[r * batch: (r + 1) * batch]
            sub = rows_of(nodes)
            row = np.repeat(np.arange(nodes.shape[0]), np.diff(sub.indptr))
            p = parts[sub.indices]
            ok = p >= 0
            counts = np.bincount(row[ok] * num_parts + p[ok], minlength=nodes.shape[0] * num_parts)
            counts = counts.reshape(nodes.shape[0], num_parts).astype(float)
            delta = np.zeros(num_parts)
            if restream:  # this batch leaves its old parts first
                np.subtract.at(delta, previous[nodes], 1.0)
            here = load + delta
            if method == "ldg":
                score = counts * (1.0 - here / capacity)[None, :] + 1e-9 * (capacity - here)[None, :]
            else:
                score = counts - alpha * gamma * np.power(np.maximum(here, 0.0), gamma - 1.0)[None, :]
            score[:, here >= capacity] = -np.inf
            choice = np.argmax(score, axis=1)
            parts[nodes] = choice
            np.add.at(delta, choice, 1.0)
            load += sync.merge(parts, nodes, choice, delta)
    return parts


def stream_parts(adj: sp.csr_matrix, num_parts: int, method: str = "fennel", seed: int = 0, passes: int = 1,
                 batch: int | None = None, slack: float = 0.05) -> np.ndarray:
    """`adj`: symmetric CSR (who neighbours whom). Returns int32 part ids, every part non-empty."""
    n = adj.shape[0]
    if num_parts < 1 or num_parts > n:
        raise PartitionError(f"--parts must be between 1 and the number of nodes ({n}), got {num_parts}")
    parts = np.full(n, -1, np.int32)
    stream_rounds(lambda nodes: adj[nodes], stream_order(n, seed), parts, num_parts, n, adj.nnz / 2, method,
                  passes, batch or default_batch(n, num_parts), slack)
    check_non_empty(parts, num_parts)
    return parts


def check_non_empty(parts: np.ndarray, num_parts: int) -> None:
    counts = np.bincount(parts, minlength=num_parts)
    if (counts == 0).any():
        raise PartitionError(f"streaming left part {int(np.argmin(counts))} empty; use fewer parts")
