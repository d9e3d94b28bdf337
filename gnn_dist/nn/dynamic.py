"""Dynamic GNNs over snapshot sequences: EvolveGCN-O and a GCRN-style graph-conv GRU.

Each is written twice over the same parameters. `step(x, graph, state)` is one
snapshot, the form PyG's layers run in the single-process reference.
`forward_group(xs, group, state)` is G consecutive snapshots
(`gnn_dist.graph.snapshot_group`), the form the distributed runtime runs: every
convolution that does not read the previous step's output runs once over the
group's block-diagonal graph, so its halo travels in one all-to-all per group
instead of one per snapshot. A training loop cuts the sequence into windows of
whole groups and detaches `state` between them (truncated backpropagation
through time). Node-wise state (GCRN's H) enters and leaves `forward_group` in
union row order; weight state (EvolveGCN's W) is the same on every rank, since
every rank evolves it from the same start.

`to_pyg_dynamic` builds the same model from PyG's `GCNConv` with the same
weights: the single-process reference the distributed runs are checked against.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from gnn_dist.graph.local import LocalGraph
from gnn_dist.graph.snapshot_group import SnapshotGroup
from gnn_dist.nn.conv import GCNConv, _glorot, aggregate_first
from gnn_dist.nn.message_passing import MessagePassing
from partition.errors import UsageError


class GCNAggregate(MessagePassing):
    """D^-1/2 (A + I) D^-1/2 X with global degrees, no weights of its own."""

    def __init__(self):
        super().__init__(aggr="sum", norm="gcn")


class EvolveGCNO(nn.Module):
    """Pareja et al. (AAAI 2020), -O variant: a GRU evolves the GCN weight itself, W_t = GRU(W_{t-1}, W_{t-1})."""

    def __init__(self, in_channels: int, out_channels: int, pyg: bool = False):
        super().__init__()
        self.in_channels, self.out_channels = in_channels, out_channels
        self.initial_weight = nn.Parameter(torch.empty(in_channels, out_channels))
        self.gru = nn.GRUCell(out_channels, out_channels)
        self.bias = nn.Parameter(torch.zeros(out_channels))
        self.aggregate = GCNAggregate()
        # reference mode: PyG's GCNConv with the evolved weight swapped in (kept out of the state dict)
        self._pyg = (_pyg_gcn(in_channels, out_channels, bias=False),) if pyg else None
        _glorot(self.initial_weight)

    def evolve(self, weight: torch.Tensor) -> torch.Tensor:
        return self.gru(weight, weight)

    def forward(self, x: torch.Tensor, graph: LocalGraph, weight: torch.Tensor) -> torch.Tensor:
        if self._pyg is not None:
            from torch.func import functional_call

            return functional_call(self._pyg[0], {"lin.weight": weight.t()}, (x, graph)) + self.bias
        if aggregate_first(x, self.in_channels, self.out_channels):  # exchange the cheaper side
            return self.aggregate(x, graph) @ weight + self.bias
        return self.aggregate(x @ weight, graph) + self.bias

    def forward_group(self, xs: torch.Tensor, group: SnapshotGroup, weights: torch.Tensor) -> torch.Tensor:
        """xs [G, n, in], weights [G, in, out] (one evolved W per snapshot): one exchange for the group."""
        if aggregate_first(xs, self.in_channels, self.out_channels):
            return torch.bmm(group.scatter(self.aggregate(group.gather(xs), group.graph)), weights) + self.bias
        return group.scatter(self.aggregate(group.gather(torch.bmm(xs, weights)), group.graph)) + self.bias


class EvolveGCN(nn.Module):
    node_state = False

    def __init__(self, in_channels: int, hidden: int, out_channels: int, layers: int = 1, pyg: bool = False):
        super().__init__()
        dims = [in_channels] + [hidden] * layers
        self.layers = nn.ModuleList(EvolveGCNO(a, b, pyg) for a, b in zip(dims[:-1], dims[1:]))
        self.head = nn.Linear(hidden, out_channels)

    def init_state(self, num_nodes: int) -> list:
        return [layer.initial_weight for layer in self.layers]

    def step(self, x: torch.Tensor, graph, state: list) -> tuple[torch.Tensor, list]:
        new = []
        for layer, w in zip(self.layers, state):
            w = layer.evolve(w)
            x = F.relu(layer(x, graph, w))
            new.append(w)
        return self.head(x), new

    def forward_group(self, xs: torch.Tensor, group: SnapshotGroup, state: list) -> tuple[torch.Tensor, list]:
        """G snapshots: the weights evolve step by step (no graph), each layer's aggregation runs once."""
        new = []
        for layer, w in zip(self.layers, state):
            ws = []
            for _ in range(len(group)):
                w = layer.evolve(w)
                ws.append(w)
            xs = F.relu(layer.forward_group(xs, group, torch.stack(ws)))
            new.append(w)
        return self.head(xs), new


class GCRN(nn.Module):
    """Seo et al. (2018) style GRU whose gates read graph convolutions of the input and the node state.

    z, r = sigmoid(conv_x(x)[:2h] + conv_h(h)); c = tanh(conv_x(x)[2h:] + conv_c(r * h));
    h' = z * h + (1 - z) * c. The state of a node lives with its owner for the whole sequence.
    """

    node_state = True

    def __init__(self, in_channels: int, hidden: int, out_channels: int, layers: int = 1, conv=GCNConv):
        super().__init__()
        if layers != 1:
            raise UsageError("gcrn has one recurrent layer (use --layers 1)")
        self.hidden = hidden
        self.conv_x = conv(in_channels, 3 * hidden)
        self.conv_h = conv(hidden, 2 * hidden)
        self.conv_c = conv(hidden, hidden)
        self.head = nn.Linear(hidden, out_channels)

    def init_state(self, num_nodes: int) -> torch.Tensor:
        return self.head.weight.new_zeros(num_nodes, self.hidden)

    def step(self, x: torch.Tensor, graph, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hx = self.conv_x(x, graph)
        zr = torch.sigmoid(hx[:, : 2 * self.hidden] + self.conv_h(h, graph))
        z, r = zr[:, : self.hidden], zr[:, self.hidden:]
        c = torch.tanh(hx[:, 2 * self.hidden:] + self.conv_c(r * h, graph))
        h = z * h + (1 - z) * c
        return self.head(F.relu(h)), h

    def forward_group(self, xs: torch.Tensor, group: SnapshotGroup, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """G snapshots: the input convolution once over the group; the state convolutions per step.

        conv_h reads h for both gates (one exchange), conv_c reads r * h, which the owner of a halo row
        alone can form: two exchanges per step, forward and backward, is the least this recurrence allows.
        """
        hx = group.scatter(self.conv_x(group.gather(xs), group.graph))  # [G, n, 3 hidden], union order
        states = []
        for s, sg in enumerate(group.snapshots):
            a, hs = hx[s].index_select(0, sg.perm), h.index_select(0, sg.perm)
            zr = torch.sigmoid(a[:, : 2 * self.hidden] + self.conv_h(hs, sg.graph))
            z, r = zr[:, : self.hidden], zr[:, self.hidden:]
            c = torch.tanh(a[:, 2 * self.hidden:] + self.conv_c(r * hs, sg.graph))
            h = (z * hs + (1 - z) * c).index_select(0, sg.inv)
            states.append(h)
        return self.head(F.relu(torch.stack(states))), h


DYNAMIC_MODELS = {"evolvegcn": EvolveGCN, "gcrn": GCRN}


def build_dynamic_model(name: str, in_channels: int, hidden: int, out_channels: int, layers: int = 1) -> nn.Module:
    if name not in DYNAMIC_MODELS:
        raise UsageError(f"unknown dynamic model '{name}' (choose from {', '.join(DYNAMIC_MODELS)})")
    return DYNAMIC_MODELS[name](in_channels, hidden, out_channels, layers)


def detach_state(state):
    if isinstance(state, torch.Tensor):
        return state.detach()
    return [s.detach() for s in state]


# ------------------------------------------------------------ PyG reference
class PyGSnapshot:
    """A snapshot as PyG layers take it: edge_index and edge_weight in global ids."""

    def __init__(self, edge_index: torch.Tensor, edge_weight: torch.Tensor | None = None):
        self.edge_index, self.edge_weight = edge_index, edge_weight


def _pyg_gcn(in_channels: int, out_channels: int, bias: bool = True) -> nn.Module:
    """PyG's own GCNConv, called as conv(x, snapshot); parameter names stay PyG's (lin.weight, bias)."""
    from torch_geometric.nn import GCNConv as PyGGCN

    class SnapshotGCN(PyGGCN):
        def forward(self, x, snap: PyGSnapshot):
            return super().forward(x, snap.edge_index, snap.edge_weight)

    return SnapshotGCN(in_channels, out_channels, bias=bias)


def to_pyg_dynamic(model: nn.Module) -> nn.Module:
    """The same model with PyG's GCNConv doing every graph step (same parameters), for one process."""
    if isinstance(model, GCRN):
        ref = GCRN(model.conv_x.in_channels, model.hidden, model.head.out_features, conv=_pyg_gcn)
    elif isinstance(model, EvolveGCN):
        ref = EvolveGCN(model.layers[0].in_channels, model.head.in_features, model.head.out_features,
                        len(model.layers), pyg=True)
    else:
        raise TypeError(f"no PyG counterpart for {type(model).__name__}")
    ref.load_state_dict(model.state_dict())
    return ref
