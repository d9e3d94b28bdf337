"""Learnable input rows for nodes that have no features: a whole graph's, or one node type's.

PyG's examples give featureless nodes (ogbn-mag's authors, an edge list) a
`torch.nn.Embedding`. Here each rank holds only its own nodes' rows, like
features: the table is a rank-local parameter (`mark_rank_local`), never
broadcast or all-reduced. A halo copy of a row reaches a peer through the
first layer's exchange, and that copy's gradient comes back the same way, so
every row's gradient is the one a single process computes.

Rows start from a counter hash of (seed, global node id, column), so a
one-process twin (`hash_normal(torch.arange(n), dim, seed)`) starts from the
same table, and any number of ranks starts alike.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from gnn_dist.nn.dropout import hash32
from gnn_dist.runtime.collectives import mark_rank_local


def hash_normal(ids: torch.Tensor, dim: int, seed: int = 0) -> torch.Tensor:
    """float32 [len(ids), dim], N(0, 1) per element (Box-Muller), a function of (seed, id, column) only."""
    ids = ids.to(torch.int64).cpu().view(-1, 1)
    cols = torch.arange(dim, dtype=torch.int64).view(1, -1)
    row_key = hash32((seed * 0x9E3779B1 + 0x51ED27) & 0xFFFFFFFF, ids)  # one key per row, then one hash per column
    u1 = (hash32(row_key, 2 * cols).double() + 0.5) / 2.0**32  # in (0, 1): the log is finite
    u2 = hash32(row_key, 2 * cols + 1).double() / 2.0**32
    return (torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(2.0 * math.pi * u2)).float()


class NodeEmbedding(nn.Module):
    """This rank's rows `rows` of a learnable [num_rows, dim] table; row i is node `rows[i] + id_offset`."""

    def __init__(self, rows: torch.Tensor, num_rows: int, dim: int, seed: int = 0, id_offset: int = 0):
        super().__init__()
        rows = rows.to(torch.int64).cpu()
        self.num_rows, self.dim = int(num_rows), int(dim)
        self.weight = mark_rank_local(nn.Parameter(hash_normal(rows + id_offset, dim, seed)), rows, num_rows)

    def forward(self) -> torch.Tensor:
        return self.weight


class Embedded(nn.Module):
    """`model`, fed learnable rows where the graph has none: state dict keys `model.*` and `embeddings.<name>.*`.

    On a homogeneous graph the one table (name `nodes`) is the whole input: `model` is called with it as
    `x`. On a typed graph each table replaces one featureless node type's input, `graph.types.x[t]`,
    for the duration of the call.
    """

    def __init__(self, model: nn.Module, embeddings: dict[str, NodeEmbedding]):
        super().__init__()
        self.model, self.embeddings = model, nn.ModuleDict(embeddings)

    def forward(self, x: torch.Tensor, graph, embed: bool = False) -> torch.Tensor:
        kwargs = {"embed": True} if embed else {}
        types = graph.types
        if types is None:
            return self.model(self.embeddings["nodes"](), graph, **kwargs)
        saved = list(types.x)
        try:
            for name, table in self.embeddings.items():
                types.x[types.node_types.index(name)] = table()
            return self.model(x, graph, **kwargs)
        finally:
            types.x[:] = saved


def input_widths(graph, dim: int) -> tuple[int, tuple[int, ...]]:
    """(input width, per-type widths) the model is built for: `dim` wherever the graph has no features."""
    if graph.types is None:
        return (dim if graph.num_features == 0 else graph.num_features), ()
    return graph.num_features, tuple(dim if d == 0 else d for d in graph.types.feature_dims)


def with_embeddings(model: nn.Module, graph, dim: int, seed: int = 0) -> nn.Module:
    """`model` as is when every node has features; else `Embedded` with a table per featureless input.

    `graph` is this rank's part (a LocalGraph, typed or not); rows are the part's inner nodes.
    """
    inner = torch.from_numpy(graph.global_ids[: graph.num_inner]).to(torch.int64)
    book = graph.book  # None for a whole graph in one process: every node is inner
    if graph.types is None:
        if graph.num_features:
            return model
        return Embedded(model, {"nodes": NodeEmbedding(inner, book.num_nodes if book else len(inner), dim, seed)})
    types, tables = graph.types, {}
    for t, name in enumerate(types.node_types):
        if types.feature_dims[t] == 0:
            ids = inner[types.index[t].cpu()]
            offset, count = book.type_range(t) if book else (int(ids.min()) if len(ids) else 0, len(ids))
            tables[name] = NodeEmbedding(ids - offset, count, dim, seed, offset)
    return Embedded(model, tables) if tables else model
