"""Built-in layers on the MessagePassing API. Parameter names match PyG's, so weights move both ways."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from gnn_dist.graph.local import LocalGraph
from gnn_dist.nn.dropout import dropout
from gnn_dist.nn.message_passing import MessagePassing, provided_halo, segment_softmax


def _glorot(t: torch.Tensor) -> None:
    bound = math.sqrt(6.0 / (t.shape[-2] + t.shape[-1]))
    nn.init.uniform_(t, -bound, bound)


def aggregate_first(x: torch.Tensor, d_in: int, d_out: int, graph: LocalGraph | None = None) -> bool:
    """Aggregate x before the linear map rather than after? Whichever exchanges fewer columns.

    A @ (X W) == (A @ X) W, so a layer may send rows of width d_in (aggregate
    first) or d_out (transform first). Transforming first always sends
    gradients back too when training (W needs them); aggregating first sends
    them only if x itself needs a gradient. The first layer's input features
    do not, so there aggregating a d_in-wide X costs d_in columns against
    2 d_out, and its backward skips the sparse product and the exchange.
    Where x's halo is already at hand (`HaloExchange.held`, given `graph`), aggregating x sends nothing.
    """
    if graph is not None and provided_halo(graph, x) is not None:
        return True
    training = torch.is_grad_enabled()
    return d_in * (1 + (training and x.requires_grad)) <= d_out * (1 + training)


class GCNConv(MessagePassing):
    """Kipf & Welling: D^-1/2 (A + I) D^-1/2 X W + b, degrees global; edge weights enter once, through gcn.

    The product is associative, so the cheaper of X and XW to exchange is the
    one aggregated (`aggregate_first`): fewer bytes on the wire, same result.
    """

    def __init__(self, in_channels: int, out_channels: int, bias: bool = True):
        super().__init__(aggr="sum", norm="gcn")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.lin = nn.Linear(in_channels, out_channels, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_channels)) if bias else None
        _glorot(self.lin.weight)

    def forward(self, x: torch.Tensor, graph: LocalGraph) -> torch.Tensor:
        if aggregate_first(x, self.in_channels, self.out_channels, graph):
            out = self.lin(self.propagate(graph, x=x))
        else:
            out = self.propagate(graph, x=self.lin(x))
        return out + self.bias if self.bias is not None else out


class SAGEConv(MessagePassing):
    """GraphSAGE with mean aggregation: W_l mean_j x_j + b + W_r x_i (edge weights ignored, as in PyG)."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__(aggr="mean", weighted=False)
        self.in_channels, self.out_channels = in_channels, out_channels
        self.lin_l = nn.Linear(in_channels, out_channels, bias=True)
        self.lin_r = nn.Linear(in_channels, out_channels, bias=False)

    def forward(self, x: torch.Tensor, graph: LocalGraph) -> torch.Tensor:
        if aggregate_first(x, self.in_channels, self.out_channels, graph):  # mean is linear: either order
            agg = self.lin_l(self.propagate(graph, x=x))
        else:
            agg = self.propagate(graph, x=F.linear(x, self.lin_l.weight)) + self.lin_l.bias
        return agg + self.lin_r(x)


class GINConv(MessagePassing):
    """Xu et al.: MLP((1 + eps) x_i + sum_j x_j) (edge weights ignored, as in PyG)."""

    def __init__(self, mlp: nn.Module, eps: float = 0.0, train_eps: bool = True):
        super().__init__(aggr="sum", weighted=False)
        self.nn = mlp
        if train_eps:
            self.eps = nn.Parameter(torch.tensor([eps]))
        else:
            self.register_buffer("eps", torch.tensor([eps]))

    def forward(self, x: torch.Tensor, graph: LocalGraph) -> torch.Tensor:
        return self.nn(self.propagate(graph, x=x) + (1 + self.eps) * x)


class GATConv(MessagePassing):
    """Velickovic et al., multi-head; attention per edge, softmax over each node's in-edges plus a self loop."""

    def __init__(self, in_channels: int, out_channels: int, heads: int = 1, concat: bool = True,
                 negative_slope: float = 0.2, dropout: float = 0.0, bias: bool = True):
        super().__init__(aggr="sum", self_loops=True)
        self.heads, self.out_channels, self.concat = heads, out_channels, concat
        self.negative_slope, self.dropout = negative_slope, dropout
        self.lin = nn.Linear(in_channels, heads * out_channels, bias=False)
        self.att_src = nn.Parameter(torch.empty(1, heads, out_channels))
        self.att_dst = nn.Parameter(torch.empty(1, heads, out_channels))
        self.bias = nn.Parameter(torch.zeros(heads * out_channels if concat else out_channels)) if bias else None
        for t in (self.lin.weight, self.att_src, self.att_dst):
            _glorot(t)

    def forward(self, x: torch.Tensor, graph: LocalGraph, return_attention_weights: bool | None = None):
        """Output rows; with `return_attention_weights` set (to anything, as in PyG), also
        `(edge_index, alpha)`: part-local edges in the layer's order (`edge_index`) and their weights [E', heads].

        Asking for the weights costs one more exchange (heads columns): `edge_updater` computes them, and
        the messages then read them as an edge input.
        """
        h = self.lin(x).view(-1, self.heads, self.out_channels)
        if return_attention_weights is None:
            out = self.propagate(graph, x=h)
        else:
            alpha = self.edge_updater(graph, a=((h * self.att_src).sum(-1), (h * self.att_dst).sum(-1)))
            out = self.propagate(graph, x=h, alpha=alpha)
        out = out.reshape(-1, self.heads * self.out_channels) if self.concat else out.mean(dim=1)
        out = out + self.bias if self.bias is not None else out
        return out if return_attention_weights is None else (out, (self.edge_index(graph), alpha))

    def _attention(self, logits: torch.Tensor, index: torch.Tensor, dim_size: int) -> torch.Tensor:
        alpha = segment_softmax(F.leaky_relu(logits, self.negative_slope), index, dim_size)
        return dropout(alpha, self.dropout, self.training)

    def edge_update(self, a_j: torch.Tensor, a_i: torch.Tensor, index: torch.Tensor, dim_size: int) -> torch.Tensor:
        return self._attention(a_j + a_i, index, dim_size)

    def message(self, x_j: torch.Tensor, x_i: torch.Tensor, index: torch.Tensor, dim_size: int,
                alpha: torch.Tensor | None = None) -> torch.Tensor:
        if alpha is None:
            alpha = self._attention((x_j * self.att_src).sum(-1) + (x_i * self.att_dst).sum(-1), index, dim_size)
        return x_j * alpha.unsqueeze(-1)
