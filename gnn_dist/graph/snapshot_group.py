"""Snapshot groups: G consecutive snapshots as one block-diagonal LocalGraph, one exchange per layer.

A convolution that does not read the previous step's output (EvolveGCN's
aggregations, GCRN's input convolution) can run over G snapshots at once, as
BLAD and PiPAD do: a block-diagonal operator times the stacked inputs is the
snapshots' products side by side, and the halo rows of all G snapshots travel
in one all-to-all instead of G. On long sequences of small graphs the
all-to-all's latency, not its bytes, is the cost, so this is where the time goes.

Layout of the group graph, so that the overlapped product and the exchange
apply unchanged:
- rows: [central rows of snapshot 0, 1, ... | marginal rows of snapshot 0, 1, ...];
- halo columns: grouped by owner, then by snapshot (each snapshot's halo is
  already in owner order); send rows likewise, by peer, then by snapshot. A
  peer's block is thus its per-snapshot blocks concatenated in snapshot order,
  the same on both ends of every link.
Within a row, columns keep their relative order, so each row sums the same
terms in the same order as the snapshot's own product.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from gnn_dist.graph.local import LocalGraph
from gnn_dist.runtime import tuning
from gnn_dist.runtime.exchange import HaloExchange, HaloPlan
from partition.graph import concat_ranges


@dataclass
class SnapshotGraph:
    graph: LocalGraph
    perm: torch.Tensor  # row r of the graph is union inner row perm[r]
    inv: torch.Tensor  # union inner row i is graph row inv[i]


@dataclass
class SnapshotGroup:
    """G snapshots: their block-diagonal graph, and each snapshot's own graph (for steps that need the last state)."""

    graph: LocalGraph
    snapshots: list[SnapshotGraph]
    perm: torch.Tensor  # group row r holds snapshot s's union row i, stored as s * num_inner + i
    inv: torch.Tensor

    def __len__(self) -> int:
        return len(self.snapshots)

    def gather(self, xs: torch.Tensor) -> torch.Tensor:
        """[G, n, ...] in union row order -> the group graph's rows."""
        return xs.reshape(-1, *xs.shape[2:]).index_select(0, self.perm)

    def scatter(self, rows: torch.Tensor) -> torch.Tensor:
        """The group graph's rows -> [G, n, ...] in union row order."""
        return rows.index_select(0, self.inv).view(len(self), -1, *rows.shape[1:])


def auto_group_size(num_local: int) -> int:
    """Snapshots per group when not set: as many as fit `tuning.SNAPSHOT_GROUP_ROWS` local rows (small graphs
    gain, big ones keep 1)."""
    return max(1, tuning.SNAPSHOT_GROUP_ROWS // max(num_local, 1))


def spans(start: int, stop: int, size: int) -> list[tuple[int, int]]:
    return [(t, min(t + size, stop)) for t in range(start, stop, size)]


def block_diagonal(snaps: list[SnapshotGraph]) -> SnapshotGroup:
    """One LocalGraph (and exchange plan) for G snapshots; a single snapshot is its own group, no copy."""
    if len(snaps) == 1:
        s = snaps[0]
        return SnapshotGroup(s.graph, snaps, s.perm, s.inv)
    gs = [s.graph for s in snaps]
    n, size = gs[0].num_inner, len(gs)
    p = gs[0].num_parts if gs[0].exchange is not None else 1
    central = np.array([g.num_central for g in gs])
    recv = np.array([g.exchange.recv_counts if g.exchange else [0] * p for g in gs]).reshape(size, p)
    send = np.array([g.exchange.send_counts if g.exchange else [0] * p for g in gs]).reshape(size, p)
    c_off = np.concatenate(([0], np.cumsum(central)))
    m_off = c_off[-1] + np.concatenate(([0], np.cumsum(n - central)))
    # halo column of (snapshot s, peer q, k-th row): after all inner rows, peer-major, then snapshot
    by_peer = np.concatenate(([0], np.cumsum(recv.sum(0))))[:-1] + np.cumsum(recv, 0) - recv  # [G, p] starts
    own = np.cumsum(recv, 1) - recv  # [G, p]: where snapshot s's block from q starts in its own halo
    row_maps, col_maps = [], []
    for s, g in enumerate(gs):
        rm = np.concatenate([c_off[s] + np.arange(central[s]), m_off[s] + np.arange(n - central[s])])
        hm = size * n + concat_ranges(by_peer[s], recv[s])
        row_maps.append(rm)
        col_maps.append(np.concatenate([rm, hm]))
    blocks = [(s, 0, central[s]) for s in range(size)] + [(s, central[s], n) for s in range(size)]
    edge = lambda s, lo, hi: slice(gs[s].indptr[lo], gs[s].indptr[hi])
    indices = np.concatenate([col_maps[s][gs[s].indices[edge(s, lo, hi)]] for s, lo, hi in blocks])
    weights = None if gs[0].edge_weight is None else \
        np.concatenate([gs[s].edge_weight[edge(s, lo, hi)] for s, lo, hi in blocks])
    degree = np.concatenate([np.diff(gs[s].indptr[lo:hi + 1]) for s, lo, hi in blocks])
    indptr = np.concatenate(([0], np.cumsum(degree)))
    # per local row (inner rows in group order, then halo rows peer-major): slices of each snapshot's arrays
    halo_blocks = [(s, n + own[s][q], n + own[s][q] + recv[s][q]) for q in range(p) for s in range(size)]
    rows_of = lambda name: np.concatenate([getattr(gs[s], name)[lo:hi] for s, lo, hi in blocks + halo_blocks])
    perm = np.empty(size * n, np.int64)
    for s, rm in enumerate(row_maps):
        perm[rm] = s * n + snaps[s].perm.cpu().numpy()
    inv = np.empty_like(perm)
    inv[perm] = np.arange(perm.shape[0])
    g0, dev = gs[0], gs[0].device
    ex = None
    if g0.exchange is not None:
        sends = [rm[g.exchange.send_idx.cpu().numpy()] for rm, g in zip(row_maps, gs)]
        s_off = np.cumsum(send, 1) - send
        send_idx = np.concatenate([sends[s][s_off[s][q]: s_off[s][q] + send[s][q]] for q in range(p) for s in range(size)])
        ex = HaloExchange(HaloPlan(torch.from_numpy(send_idx).to(dev), send.sum(0), recv.sum(0)),
                          g0.exchange.wire.twin(), g0.exchange.config)
    rows = size * n
    graph = LocalGraph(
        indptr=indptr, indices=indices, edge_weight=weights, num_inner=rows, num_central=int(central.sum()),
        num_src=rows + int(recv.sum()), in_degree=rows_of("in_degree"), in_weight=rows_of("in_weight"),
        global_ids=rows_of("global_ids"), exchange=ex, overlap=g0.overlap, device=dev, part=g0.part, num_parts=g0.num_parts,
        self_loop=None if g0.self_loop is None else rows_of("self_loop"))
    return SnapshotGroup(graph, snaps, torch.from_numpy(perm).to(dev), torch.from_numpy(inv).to(dev))
