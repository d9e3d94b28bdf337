"""Stacks of built-in layers: what `gnn-dist train --model` builds."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from gnn_dist.graph.local import LocalGraph
from gnn_dist.nn.boundary import hidden_dropout
from gnn_dist.nn.conv import GATConv, GCNConv, GINConv, SAGEConv
from gnn_dist.nn.dropout import input_dropout, relu_dropout
from gnn_dist.runtime.halo_fetch import provided

MODELS = ("gcn", "sage", "gat", "gin")


def make_conv(kind: str, d_in: int, d_out: int, heads: int = 1, last: bool = False) -> nn.Module:
    if kind == "gcn":
        return GCNConv(d_in, d_out)
    if kind == "sage":
        return SAGEConv(d_in, d_out)
    if kind == "gin":
        return GINConv(nn.Sequential(nn.Linear(d_in, d_out), nn.ReLU(), nn.Linear(d_out, d_out)))
    if kind == "gat":
        return GATConv(d_in, d_out, heads=1 if last else heads)
    raise ValueError(f"unknown model '{kind}' (choose from {', '.join(MODELS)})")


class GNN(nn.Module):
    """layers x conv, ReLU and dropout between; the last layer emits class logits."""

    def __init__(self, kind: str, in_channels: int, hidden: int, out_channels: int, layers: int = 2,
                 dropout: float = 0.5, heads: int = 1):
        super().__init__()
        if layers < 1:
            raise ValueError(f"layers must be >= 1, got {layers}")
        self.kind, self.dropout, self.heads, self.hidden = kind, dropout, heads, hidden  # (gd.save_model reads them)
        dims = [in_channels] + [hidden] * (layers - 1) + [out_channels]
        self.convs = nn.ModuleList()
        self.aggregates_input = []  # layer i exchanges its input's rows (not x W): see hidden_dropout
        for i in range(layers):
            d_in = dims[i] * (heads if kind == "gat" and i > 0 else 1)
            self.convs.append(make_conv(kind, d_in, dims[i + 1], heads, last=i == layers - 1))
            self.aggregates_input.append(kind == "gin" or (kind in ("gcn", "sage") and d_in <= dims[i + 1]))
            # rows reused across steps (stale, skipped) only where they cross before dropout (hidden_dropout):
            # a reused row sent after dropout carries another step's mask (measured: docs/benchmarks.md);
            # without dropout there is no mask, and every layer's rows may be reused as before
            self.convs[i].reuse_rows = dropout == 0 or (i > 0 and self.aggregates_input[i])

    def forward(self, x: torch.Tensor, graph: LocalGraph, embed: bool = False) -> torch.Tensor:
        """Class logits; with `embed`, the node embeddings the last layer reads instead."""
        for i, conv in enumerate(self.convs):
            if embed and i == len(self.convs) - 1:
                return F.relu(x) if i > 0 else x
            halo = None
            if i == 0:  # the input's halo may come from a once-fetched copy, dropped alike by node id
                x = input_dropout(x, graph, self.dropout, self.training)
            elif self.aggregates_input[i]:  # ReLU and dropout; rows reused across steps are sent before dropout
                x, halo = hidden_dropout(x, graph, self.dropout, self.training, i, conv)
            else:  # the previous layer's ReLU and this layer's dropout, in one pass
                x = relu_dropout(x, self.dropout, self.training)
            with provided(graph.exchange, x, halo):
                x = conv(x, graph)
        return x


def build_model(kind: str, in_channels: int, hidden: int, out_channels: int, layers: int = 2,
                dropout: float = 0.5, heads: int = 1) -> GNN:
    if kind not in MODELS:
        raise ValueError(f"unknown model '{kind}' (choose from {', '.join(MODELS)})")
    return GNN(kind, in_channels, hidden, out_channels, layers, dropout, heads)
