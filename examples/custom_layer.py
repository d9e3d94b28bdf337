"""Your own layer and model through the launcher, from the repository root:

    mpiexec -n 2 gnn-dist train --partition out/cora-2 --model examples.custom_layer:build

A layer subclasses gd.nn.MessagePassing and says what one edge sends (`message`)
and what a node makes of the sum (`update`); it never sees ranks. `propagate`
fetches the halo rows, and evaluation (eval mode or no_grad) is exact by itself.
"""
import torch
import torch.nn.functional as F

import gnn_dist as gd


class GatedConv(gd.nn.MessagePassing):
    """h_i = W (sum_j g_ij x_j) + R x_i, with a learned gate g_ij = sigmoid(a . [x_i, x_j]) per edge."""

    def __init__(self, d_in: int, d_out: int):
        super().__init__(aggr="add")  # PyG's name for "sum"
        self.gate = torch.nn.Linear(2 * d_in, 1)
        self.lin = torch.nn.Linear(d_in, d_out)
        self.root = torch.nn.Linear(d_in, d_out, bias=False)

    def forward(self, x: torch.Tensor, graph) -> torch.Tensor:
        return self.propagate(graph, x=x)

    def message(self, x_i: torch.Tensor, x_j: torch.Tensor) -> torch.Tensor:  # rows are edges
        return torch.sigmoid(self.gate(torch.cat([x_i, x_j], dim=-1))) * x_j

    def update(self, aggr: torch.Tensor, x: torch.Tensor) -> torch.Tensor:  # rows are this rank's nodes
        return self.lin(aggr) + self.root(x)


class GatedNet(torch.nn.Module):
    """Two gated layers; batch norm over every rank's nodes (gd.nn.BatchNorm), as one process would."""

    def __init__(self, d_in: int, hidden: int, d_out: int, dropout: float):
        super().__init__()
        self.conv1, self.conv2 = GatedConv(d_in, hidden), GatedConv(hidden, d_out)
        self.norm, self.dropout = gd.nn.BatchNorm(hidden), dropout

    def forward(self, x: torch.Tensor, graph) -> torch.Tensor:
        x = F.relu(self.norm(self.conv1(x, graph)))
        return self.conv2(F.dropout(x, self.dropout, self.training), graph)


def build(num_features: int, num_classes: int, config: "gd.ModelConfig") -> torch.nn.Module:
    """What `--model examples.custom_layer:build` calls; config carries --hidden, --dropout, --layers, ..."""
    return GatedNet(num_features, config.hidden, num_classes, config.dropout)
