"""The default-message matrix: gnn-dist layers and their PyG twins, shared by the test and its MPI worker."""
from __future__ import annotations

import torch

# (aggr, norm, message): every allowed row of MessagePassing's table, with PyG's aliases once each
CASES = [(aggr, norm, msg) for aggr, norm in (("sum", "none"), ("add", "raw"), ("sum", "gcn"), ("mean", "none"),
                                               ("max", "none")) for msg in ("default", "handwritten")]
OUT = 4


def make_layer(aggr: str, norm: str, message: str, in_channels: int) -> torch.nn.Module:
    """lin, then propagate: the exchange carries rows that need gradients, so backward crosses ranks too."""
    import gnn_dist as gd

    class Default(gd.nn.MessagePassing):
        def __init__(self):
            super().__init__(aggr=aggr, norm=norm)
            self.lin = torch.nn.Linear(in_channels, OUT)

        def forward(self, x, graph):
            return self.propagate(graph, x=self.lin(x))

    class Handwritten(Default):
        def message(self, x_j, edge_weight):  # the same formula, on the per-edge path
            return x_j * edge_weight.view(-1, 1)

    torch.manual_seed(0)
    return (Default if message == "default" else Handwritten)()


def readout(out: torch.Tensor, gids: torch.Tensor) -> torch.Tensor:
    """A loss whose gradient differs per node and column: sum of out * r(node id, column) / 100.

    (Scaled so that float32 sums of ~100 terms stay within the tests' atol of 1e-6.)
    """
    r = torch.sin(gids.to(out.dtype).unsqueeze(1) * 0.37 + torch.arange(out.shape[1], dtype=out.dtype))
    return (out * r).sum() / 100


def pyg_reference(layer: torch.nn.Module, aggr: str, norm: str, x: torch.Tensor, edge_index: torch.Tensor,
                  edge_weight: torch.Tensor | None) -> tuple[torch.Tensor, dict]:
    """The same layer as a PyG MessagePassing in float64 on the whole graph: output and parameter gradients."""
    from torch_geometric.nn import MessagePassing
    from torch_geometric.nn.conv.gcn_conv import gcn_norm

    n = x.shape[0]
    w = edge_weight if edge_weight is not None else torch.ones(edge_index.shape[1], dtype=torch.float64)
    if norm == "gcn":
        edge_index, w = gcn_norm(edge_index, w, n, add_self_loops=True)

    class Twin(MessagePassing):
        def __init__(self):
            super().__init__(aggr={"sum": "add", "add": "add"}.get(aggr, aggr))
            self.lin = torch.nn.Linear(x.shape[1], OUT)

        def forward(self, x, edge_index, w):
            return self.propagate(edge_index, x=self.lin(x), w=w)

        def message(self, x_j, w):
            return x_j * w.view(-1, 1)

    twin = Twin().double()
    twin.load_state_dict(layer.state_dict())
    out = twin(x, edge_index, w)
    readout(out, torch.arange(n)).backward()
    return out.detach(), {k: p.grad for k, p in twin.named_parameters()}
