"""Relation-aggregation-first exchange for R-GCN (Heta's idea; plans from `partition.typed_parts`).

For the (owner, receiver, relation) triples the partitioner chose, the owner
sends per-relation partial aggregates of its source rows for each remote
destination instead of the raw rows; raw rows other relations still need
travel as before. Both kinds share one all-to-all per layer and direction.
The receiver's relation operator drops the aggregated cross edges and adds
the partial rows in; backward mirrors it (the owner multiplies the returned
gradients by the transposed partial-sum matrix). Messages are exact fp32.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch

from gnn_dist.graph.local import LocalGraph, SplitOperator, _to_torch_csr, spmm
from gnn_dist.runtime.transfers import add_per_peer


@dataclass
class RelAggPlan:
    send_idx: torch.Tensor  # raw rows sent, grouped by receiver
    raw_send: list[int]
    raw_recv: list[int]
    halo_pos: torch.Tensor  # where received raw rows go in the halo block
    sums: list  # per receiver: CSR [rows, n_inner] partial-sum matrix, or None
    sums_t: list
    agg_send: list[int]
    agg_recv: list[int]
    pos: torch.Tensor  # where received aggregates land in the [R * n_inner] aggregate
    op: SplitOperator  # stacked relation operator without the aggregated cross edges
    exchange: object  # the row exchange: its wire carries these all-to-alls, its stats count them

    @property
    def send_splits(self) -> list[int]:
        return [a + b for a, b in zip(self.raw_send, self.agg_send)]

    @property
    def recv_splits(self) -> list[int]:
        return [a + b for a, b in zip(self.raw_recv, self.agg_recv)]


def build_plan(graph: LocalGraph, arrays: dict, rank: int) -> RelAggPlan:
    """Combine the row plan of `graph.exchange` with the stored aggregate plans of this part."""
    from gnn_dist.graph.typed import relation_operator

    ex, types, dev = graph.exchange, graph.types, graph.device
    num_parts, n, nc = ex.num_peers, graph.num_inner, graph.num_central
    send_keep, halo_keep = arrays["send_keep"].astype(bool), arrays["halo_keep"].astype(bool)
    send_idx = ex.send_idx.cpu().numpy()
    send_seg = np.repeat(np.arange(num_parts), ex.send_counts)
    recv_seg = np.repeat(np.arange(num_parts), ex.recv_counts)
    raw_send = np.bincount(send_seg[send_keep], minlength=num_parts).tolist()
    raw_recv = np.bincount(recv_seg[halo_keep], minlength=num_parts).tolist()
    sums, sums_t = [], []
    for p in range(num_parts):
        lo, hi, rows = arrays["b_off"][p], arrays["b_off"][p + 1], int(arrays["b_rows"][p])
        if rows == 0:
            sums.append(None)
            sums_t.append(None)
            continue
        m = sp.csr_matrix((arrays["b_val"][lo:hi], (arrays["b_row"][lo:hi], arrays["b_col"][lo:hi])), shape=(rows, n))
        sums.append(_to_torch_csr(m, dev))
        sums_t.append(_to_torch_csr(m.T.tocsr(), dev))
    # the relation operator without the cross edges whose relation arrives aggregated
    rows = np.repeat(np.arange(n), np.diff(graph.indptr))
    col = graph.indices
    owner = np.where(col >= n, recv_seg[np.maximum(col - n, 0)], rank)
    dropped = (col >= n) & arrays["agg_rel"][owner, rank, types.edge_type]
    full = relation_operator(graph)
    et = types.edge_type
    deg = np.maximum(types.rel_in_degree[rows, et], 1)
    marginal = []
    for r in range(types.num_relations):  # central rows have no cross edges: their operator is unchanged
        k = (et == r) & ~dropped
        marginal.append(sp.csr_matrix((1.0 / deg[k], (rows[k], col[k])), shape=(n, graph.num_src))[nc:])
    m = sp.vstack(marginal).tocsr()
    marginal_only = SplitOperator.from_scipy(sp.csr_matrix((0, n)), m, n, dev)
    op = SplitOperator(full.central, full.central_t, marginal_only.local, marginal_only.local_t, marginal_only.halo,
                       marginal_only.halo_t)
    return RelAggPlan(torch.from_numpy(send_idx[send_keep]).to(dev), raw_send, raw_recv,
                      torch.from_numpy(np.flatnonzero(halo_keep)).to(dev), sums, sums_t,
                      arrays["b_rows"].tolist(), arrays["pos_counts"].tolist(),
                      torch.from_numpy(arrays["pos"]).to(dev), op, ex)


class RelAggSpMM(torch.autograd.Function):
    """[R, n_inner, F] per-relation mean aggregates of x; raw halo rows and partial aggregates in one exchange."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, plan: RelAggPlan, graph: LocalGraph, num_relations: int,
                channel: str | None) -> torch.Tensor:
        """`channel`: the layer's ("L0": counted as fwd.raf.L0 and bwd.raf.L0), or None when evaluating
        (raf.eval); the sums are exact fp32 either way."""
        ctx.plan, ctx.graph, ctx.num_relations, ctx.channel = plan, graph, num_relations, channel
        blocks = []
        raw = x[plan.send_idx]
        for p, (rows, k) in enumerate(zip(torch.split(raw, plan.raw_send), plan.sums)):
            blocks += [rows] + ([plan.sums[p] @ x] if k is not None else [])
        # on the row exchange's wire (exact fp32; MPI where its plans go), counted under the layer's channel
        pending = plan.exchange.transfer(torch.cat(blocks), sum(plan.recv_splits), plan.recv_splits, plan.send_splits,
                                         label=f"fwd.raf.{channel}" if channel is not None else "raf.eval")
        op, n, nc, f = plan.op, graph.num_inner, graph.num_central, x.shape[1]
        out_c = op.central @ x if op.central.shape[0] else x.new_zeros(0, f)
        parts = torch.split(pending.wait(), plan.recv_splits)
        halo = x.new_zeros(graph.num_src - n, f)
        halo[plan.halo_pos] = torch.cat([b[:k] for b, k in zip(parts, plan.raw_recv)])
        partial = torch.cat([b[k:] for b, k in zip(parts, plan.raw_recv)])
        out_m = spmm(op.local, x) + spmm(op.halo, halo)
        r = num_relations
        agg = torch.cat([out_c.view(r, nc, f), out_m.view(r, n - nc, f)], dim=1).reshape(r * n, f)
        return add_per_peer(agg, plan.pos, partial, plan.agg_recv).view(r, n, f)  # peer order: CUDA's bits repeat

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        plan, graph, r = ctx.plan, ctx.graph, ctx.num_relations
        op, n, nc = plan.op, graph.num_inner, graph.num_central
        grad = grad.contiguous()
        f = grad.shape[2]
        g_c, g_m = grad[:, :nc].reshape(r * nc, f), grad[:, nc:].reshape(r * (n - nc), f)
        halo_g = spmm(op.halo_t, g_m)[plan.halo_pos]
        partial_g = grad.reshape(r * n, f)[plan.pos]
        blocks = []
        for hb, pb in zip(torch.split(halo_g, plan.raw_recv), torch.split(partial_g, plan.agg_recv)):
            blocks += [hb, pb]
        pending = plan.exchange.transfer(torch.cat(blocks), sum(plan.send_splits), plan.send_splits, plan.recv_splits,
                                         label=f"bwd.raf.{ctx.channel}")
        g_x = spmm(op.local_t, g_m)
        if nc:
            g_x += op.central_t @ g_c
        raw_parts = []
        for p, b in enumerate(torch.split(pending.wait(), plan.send_splits)):
            raw_parts.append(b[: plan.raw_send[p]])
            if plan.sums_t[p] is not None:
                g_x += plan.sums_t[p] @ b[plan.raw_send[p]:]
        add_per_peer(g_x, plan.send_idx, torch.cat(raw_parts), plan.raw_send)
        return g_x, None, None, None, None
