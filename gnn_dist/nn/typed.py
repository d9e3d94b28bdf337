"""Typed layers: per-type input projection, R-GCN (basis decomposition), and a HeteroConv container.

Parameter names follow PyG (`RGCNConv`: weight, comp, root, bias;
`HeteroConv`: convs.<src___rel___dst>.*), so weights move to PyG as they are.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from gnn_dist.graph.local import LocalGraph
from gnn_dist.graph.relagg import RelAggSpMM
from gnn_dist.graph.typed import relation_operator, relation_view
from gnn_dist.nn.conv import SAGEConv, _glorot
from gnn_dist.nn.dropout import dropout
from gnn_dist.nn.message_passing import HaloSpMM, exchange_channel
from gnn_dist.runtime.halo_fetch import fetch_halo, provided


class TypedLinear(nn.Module):
    """Each node type's features (own width) -> one common width, in the part's row order."""

    def __init__(self, feature_dims: list[int], out_channels: int):
        super().__init__()
        self.out_channels = out_channels
        self.lins = nn.ModuleList(nn.Linear(d, out_channels) for d in feature_dims)

    def forward(self, graph: LocalGraph) -> torch.Tensor:
        t = graph.types
        out = t.x[0].new_zeros(graph.num_inner, self.out_channels)
        for lin, x, idx in zip(self.lins, t.x, t.index):
            out = out.index_copy(0, idx, lin(x))
        return out


class RGCNConv(nn.Module):
    """Schlichtkrull et al.: h_i = W_root x_i + b + sum_r mean_{j in N_r(i)} W_r x_j, W_r = sum_b comp[r, b] V_b.

    All relations are aggregated by one product over the stacked relation
    operator, after one halo exchange of x, then mixed by the relation weights.
    """

    def __init__(self, in_channels: int, out_channels: int, num_relations: int, num_bases: int | None = None,
                 bias: bool = True):
        super().__init__()
        self.in_channels, self.out_channels, self.num_relations = in_channels, out_channels, num_relations
        self.num_bases = num_bases
        if num_bases:
            self.weight = nn.Parameter(torch.empty(num_bases, in_channels, out_channels))
            self.comp = nn.Parameter(torch.empty(num_relations, num_bases))
        else:
            self.weight = nn.Parameter(torch.empty(num_relations, in_channels, out_channels))
            self.register_parameter("comp", None)
        self.root = nn.Parameter(torch.empty(in_channels, out_channels))
        self.bias = nn.Parameter(torch.zeros(out_channels)) if bias else None
        for p in (self.weight, self.root) + ((self.comp,) if num_bases else ()):
            _glorot(p)

    def relation_weights(self) -> torch.Tensor:
        if self.comp is None:
            return self.weight
        return (self.comp @ self.weight.view(self.num_bases, -1)).view(self.num_relations, self.in_channels,
                                                                       self.out_channels)

    def forward(self, x: torch.Tensor, graph: LocalGraph) -> torch.Tensor:
        r, nc, n, f = self.num_relations, graph.num_central, graph.num_inner, x.shape[1]
        if graph.types.relagg is not None:  # partial aggregates for some (owner, relation) pairs
            agg = RelAggSpMM.apply(x, graph.types.relagg, graph, r, exchange_channel(graph, self))
        else:
            # rows: (r, central) then (r, marginal)
            agg = HaloSpMM.apply(x, relation_operator(graph), graph, exchange_channel(graph, self))
            agg = torch.cat([agg[: r * nc].view(r, nc, f), agg[r * nc:].view(r, n - nc, f)], dim=1)
        out = torch.einsum("rnf,rfo->no", agg, self.relation_weights()) + x @ self.root
        return out + self.bias if self.bias is not None else out


class HeteroConv(nn.Module):
    """Run a homogeneous layer per relation and sum the results per destination type (PyG's HeteroConv).

    `convs` maps "src:rel:dst" to a layer; each layer sees relation r's view
    (same rows, degrees counted in r) and only rows of r's destination type
    keep its output. The layer's input halo is fetched once (and `provide`d), not
    once per relation: each relation's layer reads the halo rows its edges
    touch, a row any relation needs crosses the wire once per layer, and the
    halo gradients of all relations go back in one all-to-all. (A layer that
    exchanges something other than its input, such as x W, still exchanges it
    itself; the built-in ones aggregate the shared input instead.)
    """

    def __init__(self, convs: dict[str, nn.Module], edge_types: list[str]):
        super().__init__()
        from torch_geometric.nn.module_dict import ModuleDict  # PyG's keys for edge-type tuples

        self.edge_types = list(edge_types)
        self.convs = ModuleDict({tuple(k.split(":")): convs[k] for k in self.edge_types if k in convs})

    def forward(self, x: torch.Tensor, graph: LocalGraph) -> torch.Tensor:
        views = [relation_view(graph, r) for r in range(len(self.edge_types))]
        ex = graph.exchange
        # x's halo once for all relations; a relation's layer finds it held and reads what it needs
        halo = fetch_halo(x, ex, exchange_channel(graph, self)) if ex is not None else None
        out = None
        with provided(ex, x, halo):
            for r, key in enumerate(self.edge_types):
                if tuple(key.split(":")) not in self.convs:
                    continue
                h = self.convs[tuple(key.split(":"))](x, views[r])
                h = torch.where(graph.types.dst_mask(r, graph.num_inner).to(h.device).unsqueeze(1), h, h.new_zeros(()))
                out = h if out is None else out + h
        return out


class TypedGNN(nn.Module):
    """TypedLinear input, then `layers` typed layers (rgcn or per-relation sage) with ReLU between."""

    def __init__(self, kind: str, feature_dims: list[int], hidden: int, out_channels: int, edge_types: list[str],
                 layers: int = 2, num_bases: int | None = None, dropout: float = 0.0):
        super().__init__()
        self.kind, self.dropout = kind, dropout
        self.input = TypedLinear(feature_dims, hidden)
        dims = [hidden] * layers + [out_channels]
        if kind == "rgcn":
            self.convs = nn.ModuleList(RGCNConv(a, b, len(edge_types), num_bases) for a, b in zip(dims[:-1], dims[1:]))
        elif kind == "hsage":
            self.convs = nn.ModuleList(HeteroConv({k: SAGEConv(a, b) for k in edge_types}, edge_types)
                                       for a, b in zip(dims[:-1], dims[1:]))
        else:
            raise ValueError(f"unknown typed model '{kind}' (choose rgcn or hsage)")
        for i, conv in enumerate(self.convs):  # halo channels by layer, and by relation for HeteroConv's layers
            conv.channel_label = f"L{i}"
            if kind == "hsage":
                for key in edge_types:
                    conv.convs[tuple(key.split(":"))].channel_label = f"L{i}.{key}"

    def forward(self, x: torch.Tensor, graph: LocalGraph, embed: bool = False) -> torch.Tensor:
        """`x` is unused (the trainer passes graph.x): each node type's features come from graph.types."""
        return self.embed_or_logits(graph, embed)

    def embed_or_logits(self, graph: LocalGraph, embed: bool) -> torch.Tensor:
        h = self.input(graph)
        for i, conv in enumerate(self.convs):
            if embed and i == len(self.convs) - 1:
                return h
            h = conv(h, graph)
            if i + 1 < len(self.convs):
                h = dropout(F.relu(h), self.dropout, self.training)
        return h


TYPED_MODELS = ("rgcn", "hsage")


# ------------------------------------------------------------ PyG reference
class PyGTypedGNN(nn.Module):
    """The same model on PyG's RGCNConv / HeteroConv(SAGEConv) over the whole graph, in one process.

    `forward(hg)` returns logits of every node in homogeneous id order (type ranges in type order).
    """

    def __init__(self, model: TypedGNN, edge_types: list[str]):
        super().__init__()
        from torch_geometric.nn import HeteroConv as PyGHeteroConv
        from torch_geometric.nn import RGCNConv as PyGRGCN
        from torch_geometric.nn import SAGEConv as PyGSAGE

        self.kind, self.edge_types = model.kind, list(edge_types)
        self.input = TypedLinear([lin.in_features for lin in model.input.lins], model.input.out_channels)
        if model.kind == "rgcn":
            self.convs = nn.ModuleList(PyGRGCN(c.in_channels, c.out_channels, c.num_relations, num_bases=c.num_bases)
                                       for c in model.convs)
        else:
            self.convs = nn.ModuleList(
                PyGHeteroConv({tuple(k.split(":")): PyGSAGE(c.convs[tuple(k.split(":"))].in_channels,
                                                            c.convs[tuple(k.split(":"))].out_channels)
                               for k in self.edge_types}, aggr="sum") for c in model.convs)
        self.load_state_dict(model.state_dict())

    def forward(self, hg) -> torch.Tensor:
        off = hg.offsets
        n = hg.total_nodes
        w = self.input.lins[0].weight  # the graph goes where the weights are
        h = torch.zeros(n, self.input.out_channels, dtype=w.dtype, device=w.device)
        for lin, t in zip(self.input.lins, hg.node_types):
            x = (hg.x[t] if torch.is_tensor(hg.x[t]) else torch.from_numpy(hg.x[t])).to(w.device, h.dtype)  # a tensor: learnable
            h = h.index_copy(0, torch.arange(off[t], off[t] + hg.num_nodes[t], device=w.device), lin(x))
        ei = {k: torch.stack([torch.as_tensor(a, dtype=torch.int64) for a in hg.edges[k]]).to(w.device)
              for k in self.edge_types}
        for i, conv in enumerate(self.convs):
            if self.kind == "rgcn":
                src = torch.cat([ei[k][0] + off[k.split(":")[0]] for k in self.edge_types])
                dst = torch.cat([ei[k][1] + off[k.split(":")[2]] for k in self.edge_types])
                rel = torch.cat([torch.full((ei[k].shape[1],), r, device=w.device) for r, k in enumerate(self.edge_types)])
                h = conv(h, torch.stack([src, dst]), rel)
            else:
                x_dict = {t: h[off[t]: off[t] + hg.num_nodes[t]] for t in hg.node_types}
                out = conv(x_dict, {tuple(k.split(":")): ei[k] for k in self.edge_types})
                h = torch.cat([out[t] if t in out else h.new_zeros(hg.num_nodes[t], out[next(iter(out))].shape[1])
                               for t in hg.node_types])
            if i + 1 < len(self.convs):
                h = F.relu(h)
        return h
