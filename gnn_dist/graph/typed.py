"""Typed parts at run time: per-type features, relation views and the stacked relation operator.

A typed part is an ordinary (type-erased) LocalGraph plus `Types`:
which node type each local row has, which relation each local edge has, and
each type's features at its own width. Halo rows of every type travel in one
buffer with one all-to-all, as for a homogeneous graph.

- `relation_view(graph, r)`: the same rows and exchange, only relation r's
  edges, degrees counted per relation — any homogeneous layer runs on it.
- `relation_operator(graph)`: every relation's mean-normalised adjacency
  stacked, so R-GCN aggregates all relations with one exchange per layer.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch

from gnn_dist.graph.load import load_partition
from gnn_dist.graph.local import LocalGraph, LocalPart, SplitOperator
from gnn_dist.runtime.launch import DistContext
from partition.errors import PartitionFormatError
from partition.store import read_meta, read_part, read_relagg, read_typed_features


@dataclass
class Types:
    node_types: list[str]
    edge_types: list[tuple[str, str, str]]
    node_type: np.ndarray  # [n_local] type id of every local row
    edge_type: np.ndarray  # [E_local] relation id of every local edge
    rel_in_degree: np.ndarray  # [n_local, R] global in-degree per relation
    x: list[torch.Tensor]  # per node type: inner rows of that type, in local order
    index: list[torch.Tensor]  # per node type: local ids of those rows
    target: str
    views: dict = field(default_factory=dict, repr=False)
    relagg: object = None  # gnn_dist.graph.relagg.RelAggPlan when R-GCN sends relation aggregates first

    @property
    def num_relations(self) -> int:
        return len(self.edge_types)

    @property
    def feature_dims(self) -> list[int]:
        return [int(x.shape[1]) for x in self.x]

    def dst_mask(self, r: int, num_inner: int) -> torch.Tensor:
        """Inner rows whose type is relation r's destination type."""
        t = self.node_types.index(self.edge_types[r][2])
        return torch.from_numpy(self.node_type[:num_inner] == t)


def attach_types(graph: LocalPart, plan, meta: dict, xs: list[np.ndarray]) -> LocalPart:
    node_types, edge_types = meta["node_types"], [tuple(e.split(":")) for e in meta["edge_types"]]
    r = len(edge_types)
    deg = plan.rel_in_degree
    if deg.shape[1] < r:  # relations without edges at the end of the list
        deg = np.concatenate([deg, np.zeros((deg.shape[0], r - deg.shape[1]), deg.dtype)], 1)
    inner_t = plan.node_type[: plan.num_inner]
    index = [torch.from_numpy(np.flatnonzero(inner_t == t)).to(graph.device) for t in range(len(node_types))]
    for t, (x, idx) in enumerate(zip(xs, index)):
        if x.shape[0] != idx.shape[0]:
            raise PartitionFormatError(f"part {plan.part}: node type '{node_types[t]}' has {x.shape[0]} feature rows "
                                 f"for {idx.shape[0]} inner nodes")
    graph.types = Types(node_types, edge_types, plan.node_type, plan.edge_type, deg,
                        [torch.from_numpy(np.asarray(x, np.float32)).to(graph.device) for x in xs], index,
                        meta["target_type"])
    return graph


def local_typed(hg, device: torch.device = torch.device("cpu")) -> LocalPart:
    """A whole `TypedGraph` in one process (every node inner, no exchange)."""
    from partition.build import build_parts

    g = hg.to_homogeneous()
    plan = next(build_parts(g, np.zeros(g.num_nodes, dtype=np.int32), 1))
    graph = LocalGraph.from_plan(plan, g.num_classes, 1, None, device)
    off = hg.offsets
    inner_t = plan.node_type
    xs = [hg.x[t][plan.global_ids[inner_t == i] - off[t]] for i, t in enumerate(hg.node_types)]
    return attach_types(graph, plan, {**hg.meta()}, xs)


def load_typed_partition(path: str | Path, ctx: DistContext, overlap: bool = True, verify: bool = True,
                          exchange=None, relagg: bool = False) -> LocalPart:
    """This rank's typed part; `relagg` prepares relation-aggregation-first exchange for R-GCN."""
    meta = read_meta(path)
    if "node_types" not in meta or meta.get("format_version") != 2:
        raise PartitionFormatError(f"{path} does not hold a typed graph (no node types)")
    graph = load_partition(path, ctx, overlap, verify, exchange)
    plan = read_part(path, ctx.rank, meta, verify=False)
    graph = attach_types(graph, plan, meta, read_typed_features(path, ctx.rank, meta))
    if relagg and graph.exchange is not None:
        from gnn_dist.graph.relagg import build_plan

        graph.types.relagg = build_plan(graph, read_relagg(path, ctx.rank), ctx.rank)
    return graph


def relation_view(graph: LocalPart, r: int) -> LocalPart:
    """Relation r's edges over the same rows and exchange; `mean`/`gcn` count degrees in relation r."""
    types = graph.types
    if r not in types.views:
        keep = types.edge_type == r
        rows = np.repeat(np.arange(graph.num_inner), np.diff(graph.indptr))[keep]
        indptr = np.zeros(graph.num_inner + 1, np.int64)
        np.cumsum(np.bincount(rows, minlength=graph.num_inner), out=indptr[1:])
        deg = types.rel_in_degree[:, r].astype(np.int64)
        types.views[r] = LocalPart(  # the part's own node data, shared: its input features stay the input
            indptr=indptr, indices=graph.indices[keep], edge_weight=None, num_inner=graph.num_inner,
            num_central=graph.num_central, num_src=graph.num_src, in_degree=deg, in_weight=deg.astype(np.float64),
            global_ids=graph.global_ids, exchange=graph.exchange, overlap=graph.overlap, device=graph.device,
            part=graph.part, num_parts=graph.num_parts, data=graph.data)
    return types.views[r]


def relation_operator(graph: LocalGraph) -> SplitOperator:
    """[A_1; ...; A_R] split at the central boundary: rows (r, central) first, then (r, marginal).

    A_r holds 1 / (global in-degree of the destination in relation r) on each r-edge: PyG's
    per-relation mean. One HaloSpMM over it aggregates every relation after one exchange.
    """
    if "relations" not in graph._ops:
        types, n, nc = graph.types, graph.num_inner, graph.num_central
        rows = np.repeat(np.arange(n), np.diff(graph.indptr))
        et = types.edge_type
        deg = np.maximum(types.rel_in_degree[rows, et], 1)
        central, marginal = [], []
        for r in range(types.num_relations):
            keep = et == r
            a = sp.csr_matrix((1.0 / deg[keep], (rows[keep], graph.indices[keep])), shape=(n, graph.num_src))
            central.append(a[:nc, :n])
            marginal.append(a[nc:])
        c = sp.vstack(central).tocsr()
        m = sp.vstack(marginal).tocsr()
        graph._ops["relations"] = SplitOperator.from_scipy(c, m, n, graph.device)
    return graph._ops["relations"]
