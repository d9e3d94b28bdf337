"""Streaming partitioning across MPI ranks, for edge lists no single process should hold.

Each rank reads its share of the chunk files (file i goes to rank i mod R),
then edges travel to the rank that owns their endpoints (rank r owns the node
id range [r N / R, (r+1) N / R)), both directions, so each rank holds the
symmetric adjacency of its own nodes only: O(E / R) memory plus O(N) for the
part id of every node. Ranks then stream their nodes in lockstep rounds
(`partition.streaming.stream_rounds`); after each round every rank learns
every placement and the global part loads. With one rank this is exactly the
single-process `stream_parts` on the same graph, seed and batch.
"""
from __future__ import annotations

import resource
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import scipy.sparse as sp

from partition.edgelist import read_chunks
from partition.errors import DataError, GnnDistError, UsageError
from partition.node_ids import DENSE_FLOOR
from partition.streaming import check_non_empty, default_batch, stream_order, stream_rounds


def owner_of(ids: np.ndarray, num_nodes: int, size: int) -> np.ndarray:
    return (ids.astype(np.int64) * size) // num_nodes


def node_range(rank: int, num_nodes: int, size: int) -> tuple[int, int]:
    """The ids whose owner_of is `rank`."""
    return (rank * num_nodes + size - 1) // size, ((rank + 1) * num_nodes + size - 1) // size


def agree(comm, step: Callable):
    """Run `step` on every rank; if any rank fails, every rank raises the first failure (no rank hangs)."""
    try:
        result, error = step(), None
    except GnnDistError as e:
        result, error = None, str(e)
    errors = comm.allgather(error)
    bad = [(r, e) for r, e in enumerate(errors) if e is not None]
    if bad:
        r, e = bad[0]
        raise DataError(e if comm.Get_size() == 1 else f"rank {r}: {e}")
    return result


class MPISync:
    """Merges one round's placements and load changes across ranks."""

    def __init__(self, comm, num_parts: int, on_round: Callable[[], None] | None = None):
        self.comm, self.num_parts, self.on_round = comm, num_parts, on_round

    def rounds(self, mine: int) -> int:
        from mpi4py import MPI

        return self.comm.allreduce(mine, op=MPI.MAX)

    def merge(self, parts: np.ndarray, nodes: np.ndarray, choice: np.ndarray, delta: np.ndarray) -> np.ndarray:
        mine = nodes.astype(np.int64) * self.num_parts + choice  # one array: node and its part
        counts = self.comm.allgather(mine.shape[0])
        everyone = np.empty(sum(counts), np.int64)
        self.comm.Allgatherv(mine, [everyone, counts])
        parts[everyone // self.num_parts] = everyone % self.num_parts
        total = np.empty_like(delta)
        self.comm.Allreduce(delta, total)
        if self.on_round is not None:
            self.on_round()
        return total


@dataclass
class StreamResult:
    parts: np.ndarray  # int32 part of every node (every rank holds it)
    num_nodes: int
    num_edges: int  # directed edges read, self loops included
    cut_fraction: float  # of symmetric adjacency entries (both directions of each pair)
    balance: float  # largest part / mean part
    read_s: float
    assign_s: float
    peak_rss_mb: list  # per rank


def _narrow(a: np.ndarray) -> np.ndarray:
    """int32 where every id fits: half the memory for every copy the shuffle makes."""
    return a.astype(np.int32) if not a.size or a.max() <= np.iinfo(np.int32).max else a


def _read_share(files: list, rank: int, size: int) -> tuple[np.ndarray, np.ndarray, int]:
    src, dst = [np.zeros(0, np.int32)], [np.zeros(0, np.int32)]
    for _, s, d in read_chunks(files[rank::size]):
        src.append(_narrow(s))
        dst.append(_narrow(d))
    src, dst = np.concatenate(src), np.concatenate(dst)
    return src, dst, int(max(src.max(), dst.max())) + 1 if src.size else 0


def _shuffle(comm, src: np.ndarray, dst: np.ndarray, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Send each non-loop edge to both endpoints' owners as (row, neighbour)."""
    size = comm.Get_size()
    keep = src != dst
    rows = np.concatenate([dst[keep], src[keep]])
    cols = np.concatenate([src[keep], dst[keep]])
    dest = owner_of(rows, num_nodes, size)
    order = np.argsort(dest, kind="stable")
    rows, cols = rows[order], cols[order]
    send = np.bincount(dest, minlength=size).astype(np.int64)
    del dest, order
    recv = np.empty_like(send)
    comm.Alltoall(send, recv)
    got_rows, got_cols = np.empty(int(recv.sum()), rows.dtype), np.empty(int(recv.sum()), rows.dtype)
    comm.Alltoallv([rows, send], [got_rows, recv])
    comm.Alltoallv([cols, send], [got_cols, recv])
    return got_rows, got_cols


def mpi_stream_parts(comm, files: list, num_parts: int, method: str = "fennel", passes: int = 1, seed: int = 0,
                     num_nodes: int | None = None, slack: float = 0.05, batch: int | None = None,
                     on_round: Callable[[], None] | None = None) -> StreamResult:
    from mpi4py import MPI

    rank, size = comm.Get_rank(), comm.Get_size()
    t0 = time.perf_counter()
    src, dst, top = agree(comm, lambda: _read_share(files, rank, size))
    n_seen = comm.allreduce(top, op=MPI.MAX)
    entries = 2 * comm.allreduce(int(src.shape[0]))

    def check_range():
        if num_nodes is not None and n_seen > num_nodes:
            raise UsageError(f"node id {n_seen - 1} is out of range for --nodes {num_nodes}")
        if num_nodes is None and n_seen > max(DENSE_FLOOR, 2 * entries):  # a part id per id up to the largest
            raise DataError(f"node ids are sparse (up to {n_seen - 1} for at most {entries} distinct ids): assign "
                            f"does not compact them; `gnn-dist partition --dataset edges:...` does, on one machine")
        if not 1 <= num_parts <= (num_nodes or n_seen):
            raise UsageError(f"--parts must be between 1 and the number of nodes ({num_nodes or n_seen}), "
                                 f"got {num_parts}")

    agree(comm, check_range)
    n = num_nodes or n_seen
    ids = np.int32 if n - 1 <= np.iinfo(np.int32).max else np.int64  # every rank sends the same type
    src, dst = src.astype(ids, copy=False), dst.astype(ids, copy=False)
    num_edges = comm.allreduce(int(src.shape[0]))
    rows, cols = _shuffle(comm, src, dst, n)
    del src, dst
    lo, hi = node_range(rank, n, size)
    rows -= lo
    adj = sp.csr_matrix((np.ones(rows.shape[0], np.int32), (rows, cols)), shape=(hi - lo, n))
    adj.sort_indices()
    del rows, cols
    nnz = comm.allreduce(int(adj.nnz))
    read_s = time.perf_counter() - t0

    t1 = time.perf_counter()
    order = stream_order(n, seed)
    order = order[(order >= lo) & (order < hi)]
    parts = np.full(n, -1, np.int32)
    stream_rounds(lambda nodes: adj[nodes - lo], order, parts, num_parts, n, nnz / 2, method, passes,
                  batch or max(1, default_batch(n, num_parts) // size), slack, MPISync(comm, num_parts, on_round))
    check_non_empty(parts, num_parts)
    assign_s = time.perf_counter() - t1

    mine = np.repeat(np.arange(lo, hi), np.diff(adj.indptr))
    cut_local = float(adj.data[parts[mine] != parts[adj.indices]].sum())
    cut, total = comm.allreduce(cut_local), comm.allreduce(float(adj.data.sum()))
    sizes = np.bincount(parts, minlength=num_parts)
    rss = comm.allgather(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return StreamResult(parts, n, num_edges, cut / max(total, 1.0), float(sizes.max() / (n / num_parts)),
                        read_s, assign_s, rss)
