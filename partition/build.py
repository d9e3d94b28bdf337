"""Turn a node -> part assignment into per-part local graphs and halo plans (docs/design.md §2).

Local order of one part: [inner central | inner marginal | halo by owner].
Halo rows from owner q are sorted by q's local id, which is exactly the order
q sends them in, so the all-to-all receive buffer is the halo block.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from partition.graph import Graph, concat_ranges


@dataclass
class PartPlan:
    """Everything one rank needs, in local ids; the arrays are written as-is to part-K/."""

    part: int
    global_ids: np.ndarray  # int64 [n_inner + n_halo], local -> global
    num_inner: int
    num_central: int
    indptr: np.ndarray  # int64 [n_inner + 1], rows = inner destinations
    indices: np.ndarray  # int64 [E_local], local source ids (inner or halo)
    edge_weight: np.ndarray | None  # float32 [E_local] raw weights, None = all ones
    in_degree: np.ndarray  # int64 [n_local], global in-degree of each local row
    out_degree: np.ndarray  # int64 [n_local]
    in_weight: np.ndarray  # float64 [n_local], global weighted in-degree
    x: np.ndarray  # float32 [n_inner, F]
    y: np.ndarray  # int64 [n_inner]
    train_mask: np.ndarray
    val_mask: np.ndarray
    test_mask: np.ndarray
    send_idx: np.ndarray  # int64, local ids of inner rows sent, grouped by destination part
    send_counts: np.ndarray  # int64 [P]
    recv_counts: np.ndarray  # int64 [P]
    self_loop: np.ndarray | None = None  # bool [n_local]: node has a self loop (GCN keeps it, as PyG does)
    edge_type: np.ndarray | None = None  # int64 [E_local]: relation of each local edge (typed)
    node_type: np.ndarray | None = None  # int64 [n_local]: type of each local row (typed)
    rel_in_degree: np.ndarray | None = None  # int64 [n_local, R]: global in-degree per relation
    edge_attr: np.ndarray | None = None  # float32 [E_local, D]: edge features

    @property
    def num_halo(self) -> int:
        return int(self.global_ids.shape[0] - self.num_inner)

    @property
    def num_edges(self) -> int:
        return int(self.indices.shape[0])


def local_order(graph: Graph, parts: np.ndarray, num_parts: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Local id of every node inside its owner, plus the marginal flags and the cross-edge mask."""
    src, dst = graph.edge_index()
    cross = parts[src] != parts[dst]
    marginal = np.zeros(graph.num_nodes, dtype=bool)
    marginal[dst[cross]] = True
    gid = np.arange(graph.num_nodes, dtype=np.int64)
    order = np.lexsort((gid, marginal, parts))
    starts = np.zeros(num_parts + 1, dtype=np.int64)
    np.cumsum(np.bincount(parts, minlength=num_parts), out=starts[1:])
    local_id = np.empty(graph.num_nodes, dtype=np.int64)
    local_id[order] = np.arange(graph.num_nodes, dtype=np.int64) - starts[parts[order]]
    return local_id, marginal, cross


def relation_in_degrees(graph: Graph, dst: np.ndarray) -> np.ndarray | None:
    """[node, relation] global in-degree: a mean over each relation's in-edges needs it (typed graphs only)."""
    if graph.edge_type is None:
        return None
    num_rel = max(int(graph.edge_type.max()) + 1 if graph.num_edges else 0, 1)
    rel_deg = np.bincount(dst * num_rel + graph.edge_type, minlength=graph.num_nodes * num_rel)
    return rel_deg.reshape(graph.num_nodes, num_rel).astype(np.int64)


def halo_lists(graph: Graph, parts: np.ndarray, num_parts: int, local_id: np.ndarray, src: np.ndarray,
               dst: np.ndarray) -> list[np.ndarray]:
    """halo[p]: remote sources of p's inner nodes (from the cross-part edges src -> dst), grouped by owner,
    in the owner's local order, so the all-to-all receive buffer is the halo block."""
    keys = np.unique(parts[dst] * graph.num_nodes + src)
    need_part, need_node = keys // graph.num_nodes, keys % graph.num_nodes
    order = np.lexsort((local_id[need_node], parts[need_node], need_part))
    need_part, need_node = need_part[order], need_node[order]
    bounds = np.searchsorted(need_part, np.arange(num_parts + 1))
    return [need_node[bounds[p]:bounds[p + 1]] for p in range(num_parts)]


def local_csr(graph: Graph, parts: np.ndarray, p: int, local_id: np.ndarray, inner: np.ndarray,
              halo: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Part p's in-edges as CSR over its inner rows with local source ids: (indptr, indices, global edge ids)."""
    n_inner = inner.shape[0]
    counts = np.diff(graph.indptr)[inner]
    eids = concat_ranges(graph.indptr[inner], counts)
    srcs = graph.indices[eids]
    local_src = np.empty_like(srcs)
    own = parts[srcs] == p
    local_src[own] = local_id[srcs[own]]
    h_sorted = np.argsort(halo, kind="stable")
    local_src[~own] = n_inner + h_sorted[np.searchsorted(halo, srcs[~own], sorter=h_sorted)]
    indptr = np.zeros(n_inner + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    return indptr, local_src, eids


def build_parts(graph: Graph, parts: np.ndarray, num_parts: int):
    """Yield one PartPlan per part (a generator, so only one part's arrays live at a time)."""
    parts = np.asarray(parts, dtype=np.int64)
    local_id, marginal, cross = local_order(graph, parts, num_parts)
    src, dst = graph.edge_index()
    in_deg, out_deg, in_w = graph.in_degree(), graph.out_degree(), graph.weighted_in_degree()
    has_loop = np.zeros(graph.num_nodes, dtype=bool)
    has_loop[dst[src == dst]] = True
    rel_deg = relation_in_degrees(graph, dst)
    halo = halo_lists(graph, parts, num_parts, local_id, src[cross], dst[cross])

    for p in range(num_parts):
        inner = np.flatnonzero(parts == p)
        inner = inner[np.argsort(local_id[inner], kind="stable")]
        n_inner = inner.shape[0]
        num_central = int(n_inner - marginal[inner].sum())
        h = halo[p]
        glob = np.concatenate([inner, h])
        indptr, local_src, eids = local_csr(graph, parts, p, local_id, inner, h)

        send_lists = [local_id[halo[r][parts[halo[r]] == p]] for r in range(num_parts)]
        recv_counts = np.bincount(parts[h], minlength=num_parts).astype(np.int64)
        yield PartPlan(
            part=p,
            global_ids=glob,
            num_inner=int(n_inner),
            num_central=num_central,
            indptr=indptr,
            indices=local_src,
            edge_weight=None if graph.edge_weight is None else graph.edge_weight[eids],
            in_degree=in_deg[glob],
            out_degree=out_deg[glob],
            in_weight=in_w[glob],
            x=graph.x[inner],
            y=graph.y[inner],
            train_mask=graph.train_mask[inner],
            val_mask=graph.val_mask[inner],
            test_mask=graph.test_mask[inner],
            send_idx=np.concatenate(send_lists).astype(np.int64) if send_lists else np.zeros(0, np.int64),
            send_counts=np.array([s.shape[0] for s in send_lists], dtype=np.int64),
            recv_counts=recv_counts,
            self_loop=has_loop[glob],
            edge_type=None if graph.edge_type is None else graph.edge_type[eids],
            node_type=None if graph.node_type is None else graph.node_type[glob],
            rel_in_degree=None if rel_deg is None else rel_deg[glob],
            edge_attr=None if graph.edge_attr is None else graph.edge_attr[eids],
        )
