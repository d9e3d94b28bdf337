"""Export a gnn-dist model to plain PyG layers with the same weights, for inference on one machine."""
from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from gnn_dist.nn.models import GNN


def pyg_conv(conv: nn.Module) -> nn.Module:
    """The torch_geometric conv of the same kind and shape as a built-in conv (gd.nn.GCNConv, SAGEConv, GINConv,
    GATConv), weights not copied: its parameter names are the built-in's, so its state dict loads."""
    from torch_geometric import nn as pyg

    from gnn_dist.nn.conv import GATConv, GCNConv, GINConv, SAGEConv

    if isinstance(conv, GCNConv):
        return pyg.GCNConv(conv.in_channels, conv.out_channels, bias=conv.bias is not None)
    if isinstance(conv, SAGEConv):
        return pyg.SAGEConv(conv.in_channels, conv.out_channels, aggr="mean")
    if isinstance(conv, GINConv):  # the MLP as it is (its weights are loaded again with the conv's)
        return pyg.GINConv(copy.deepcopy(conv.nn), train_eps=isinstance(conv.eps, nn.Parameter))
    if isinstance(conv, GATConv):
        return pyg.GATConv(conv.lin.in_features, conv.out_channels, heads=conv.heads, concat=conv.concat,
                           negative_slope=conv.negative_slope, dropout=conv.dropout, bias=conv.bias is not None)
    raise TypeError(f"to_pyg exports gd.nn.GCNConv, SAGEConv, GINConv and GATConv, not {type(conv).__name__}")


class PyGNN(nn.Module):
    """The PyG twin of `GNN`: same structure, torch_geometric convs, forward(x, edge_index)."""

    def __init__(self, model: GNN):
        super().__init__()
        self.dropout = model.dropout
        self.convs = nn.ModuleList(pyg_conv(conv) for conv in model.convs)
        self.load_state_dict(model.state_dict())

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, edge_weight: torch.Tensor | None = None) -> torch.Tensor:
        for i, conv in enumerate(self.convs):
            x = F.dropout(x, p=self.dropout, training=self.training)
            weighted = edge_weight is not None and hasattr(conv, "normalize")
            x = conv(x, edge_index, edge_weight) if weighted else conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = F.relu(x)
        return x


def to_pyg(model: nn.Module) -> nn.Module:
    """The PyG twin, same weights, for one process: of a built-in static model (the registry's static names), or
    of one built-in conv (`gd.nn.GCNConv(...)` -> torch_geometric's GCNConv). Typed and dynamic models have
    theirs in `gnn_dist.nn.typed.PyGTypedGNN` and `gnn_dist.nn.dynamic.to_pyg_dynamic`."""
    from gnn_dist.nn.registry import names

    if isinstance(model, GNN):
        if model.kind not in names("static"):
            raise TypeError(f"to_pyg exports the built-in static models ({', '.join(names('static'))}), "
                            f"not {model.kind}")
        return PyGNN(model)
    from gnn_dist.nn.conv import GATConv, GCNConv, GINConv, SAGEConv

    if not isinstance(model, (GCNConv, SAGEConv, GINConv, GATConv)):
        raise TypeError(f"to_pyg exports the built-in static models ({', '.join(names('static'))}) and convs "
                        f"(gd.nn.GCNConv, SAGEConv, GINConv, GATConv), not {type(model).__name__}")
    twin = pyg_conv(model)
    twin.load_state_dict(model.state_dict())
    return twin.train(model.training)
