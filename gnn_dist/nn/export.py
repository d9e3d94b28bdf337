"""Export a gnn-dist model to plain PyG layers with the same weights, for inference on one machine."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from gnn_dist.nn.models import GNN


class PyGNN(nn.Module):
    """The PyG twin of `GNN`: same structure, torch_geometric convs, forward(x, edge_index)."""

    def __init__(self, model: GNN):
        super().__init__()
        from torch_geometric.nn import GATConv, GCNConv, GINConv, SAGEConv

        self.dropout = model.dropout
        self.convs = nn.ModuleList()
        for conv in model.convs:
            if model.kind == "gcn":
                c = GCNConv(conv.in_channels, conv.out_channels)
            elif model.kind == "sage":
                c = SAGEConv(conv.in_channels, conv.out_channels, aggr="mean")
            elif model.kind == "gin":
                mlp = nn.Sequential(*[type(m)(m.in_features, m.out_features) if isinstance(m, nn.Linear) else type(m)()
                                      for m in conv.nn])
                c = GINConv(mlp, train_eps=isinstance(conv.eps, nn.Parameter))
            elif model.kind == "gat":
                c = GATConv(conv.lin.in_features, conv.out_channels, heads=conv.heads, concat=conv.concat,
                            negative_slope=conv.negative_slope, dropout=conv.dropout)
            else:
                raise ValueError(f"no PyG export for model kind '{model.kind}'")
            self.convs.append(c)
        self.load_state_dict(model.state_dict())

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, edge_weight: torch.Tensor | None = None) -> torch.Tensor:
        for i, conv in enumerate(self.convs):
            x = F.dropout(x, p=self.dropout, training=self.training)
            weighted = edge_weight is not None and hasattr(conv, "normalize")
            x = conv(x, edge_index, edge_weight) if weighted else conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = F.relu(x)
        return x


def to_pyg(model: GNN) -> PyGNN:
    """The PyG twin of a built-in static model (the registry's static names); typed and dynamic models have
    theirs in `gnn_dist.nn.typed.PyGTypedGNN` and `gnn_dist.nn.dynamic.to_pyg_dynamic`."""
    from gnn_dist.nn.registry import names

    if not isinstance(model, GNN) or model.kind not in names("static"):
        raise TypeError(f"to_pyg exports the built-in static models ({', '.join(names('static'))}), "
                        f"not {type(model).__name__}")
    return PyGNN(model)
