"""PyG's own layers and models, wrapped by gd.nn.Distributed: the cases shared by tests/test_pyg_wrap.py and its
MPI worker (tests/pyg_wrap_worker.py), and the single-process PyG reference they are held to."""
from __future__ import annotations

import numpy as np
import torch

import gnn_dist as gd
from partition.graph import Graph

N, F_IN, D_EDGE, OUT, CLASSES = 80, 5, 3, 4, 3


def random_graph() -> Graph:
    """No duplicate edges (attention weights are compared per (source, destination)), self loops on some
    nodes, nodes without in-edges, edge weights and edge features."""
    rng = np.random.default_rng(11)
    src, dst = rng.integers(0, N, 420), rng.integers(0, N - 5, 420)  # the last 5 nodes receive nothing
    loops = np.arange(0, N, 5)
    pairs = np.unique(np.stack([np.concatenate([src[src != dst], loops]), np.concatenate([dst[src != dst], loops])]),
                      axis=1)
    e = pairs.shape[1]
    x = rng.standard_normal((N, F_IN)).astype(np.float32)
    ones = np.ones(N, bool)
    return Graph.from_edges(pairs[0], pairs[1], N, x, rng.integers(0, CLASSES, N), ones, ones, ones,
                            edge_weight=rng.uniform(0.5, 1.5, e).astype(np.float32),
                            edge_attr=rng.standard_normal((e, D_EDGE)).astype(np.float32), num_classes=CLASSES)


def one_way_graph(parts: int) -> tuple[Graph, np.ndarray]:
    """(graph, assignment): N nodes in `parts` blocks of ids, edges within a block or from a lower block to a
    higher one only. Part 0 then has no halo and no marginal rows, yet sends rows, and must take their
    gradients back: the all-to-all of a layer's backward needs every rank."""
    g = random_graph()
    part = (np.arange(N) * parts // N).astype(np.int32)
    src, dst = g.edge_index()
    keep = part[src] <= part[dst]
    ones = np.ones(N, bool)
    one_way = Graph.from_edges(src[keep], dst[keep], N, g.x, g.y, ones, ones, ones,
                               edge_weight=g.edge_weight[keep], edge_attr=g.edge_attr[keep], num_classes=CLASSES)
    return one_way, part


ONE_WAY_CASES = ("SAGEConv", "GATConv")


def _mlp(d_in: int) -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(d_in, OUT), torch.nn.ReLU(), torch.nn.Linear(OUT, OUT))


def _layers() -> dict:
    """name -> (builder, the edge tensors its forward gets: names of graph fields)."""
    import torch_geometric.nn as pyg

    return {
        "SAGEConv": (lambda: pyg.SAGEConv(F_IN, OUT), ()),
        "GATConv": (lambda: pyg.GATConv(F_IN, OUT, heads=2), ()),
        "GATConv-edge": (lambda: pyg.GATConv(F_IN, OUT, heads=2, edge_dim=D_EDGE), ("edge_attr",)),
        "GATv2Conv": (lambda: pyg.GATv2Conv(F_IN, OUT, heads=2, edge_dim=D_EDGE), ("edge_attr",)),
        "GINConv": (lambda: pyg.GINConv(_mlp(F_IN), train_eps=True), ()),
        "GINEConv": (lambda: pyg.GINEConv(_mlp(F_IN), train_eps=True, edge_dim=D_EDGE), ("edge_attr",)),
        "TransformerConv": (lambda: pyg.TransformerConv(F_IN, OUT, heads=2, edge_dim=D_EDGE), ("edge_attr",)),
        "GraphConv": (lambda: pyg.GraphConv(F_IN, OUT), ("edge_weight",)),
        "EdgeConv": (lambda: pyg.EdgeConv(_mlp(2 * F_IN)), ()),
        "ResGatedGraphConv": (lambda: pyg.ResGatedGraphConv(F_IN, OUT), ()),
        "SimpleConv": (lambda: pyg.SimpleConv("mean", "sum"), ("edge_weight",)),
        "MFConv": (lambda: pyg.MFConv(F_IN, OUT, max_degree=4), ()),
        "NNConv": (lambda: pyg.NNConv(F_IN, OUT, _mlp_to(D_EDGE, F_IN * OUT), aggr="mean"), ("edge_attr",)),
        "CGConv": (lambda: pyg.CGConv(F_IN, D_EDGE), ("edge_attr",)),
        "FeaStConv": (lambda: pyg.FeaStConv(F_IN, OUT, heads=2), ()),
        "LEConv": (lambda: pyg.LEConv(F_IN, OUT), ("edge_weight",)),
        "GENConv": (lambda: pyg.GENConv(F_IN, OUT, aggr="softmax", learn_t=True, edge_dim=D_EDGE), ("edge_attr",)),
        "GeneralConv": (lambda: pyg.GeneralConv(F_IN, OUT, D_EDGE, attention=True), ("edge_attr",)),
        "FiLMConv": (lambda: Adapted(pyg.FiLMConv(F_IN, OUT, num_relations=2),
                                     lambda c, x, e, edge_weight: c(x, e, (edge_weight > 1).long())), ("edge_weight",)),
        "RGCNConv": (lambda: Adapted(pyg.RGCNConv(F_IN, OUT, num_relations=2),
                                     lambda c, x, e, edge_weight: c(x, e, (edge_weight > 1).long())), ("edge_weight",)),
        "FastRGCNConv": (lambda: Adapted(pyg.FastRGCNConv(F_IN, OUT, num_relations=2),
                                         lambda c, x, e, edge_weight: c(x, e, (edge_weight > 1).long())),
                         ("edge_weight",)),
        "GMMConv": (lambda: pyg.GMMConv(F_IN, OUT, dim=D_EDGE, kernel_size=2), ("edge_attr",)),
        "WLConvContinuous": (lambda: pyg.WLConvContinuous(), ("edge_weight",)),
        "AntiSymmetricConv": (lambda: pyg.AntiSymmetricConv(F_IN, num_iters=2), ()),
    }


class Adapted(torch.nn.Module):
    """A conv whose forward wants more than (x, edges): the extra inputs made from x, alike on every rank."""

    def __init__(self, conv: torch.nn.Module, call):
        super().__init__()
        self.conv, self.call = conv, call

    def forward(self, x, edges, **edge_tensors):
        return self.call(self.conv, x, edges, **edge_tensors)


def pna_histogram() -> torch.Tensor:
    """PNAConv's degree histogram of the whole test graph, as PyG's docs make it."""
    from torch_geometric.utils import degree

    return torch.bincount(degree(torch.from_numpy(random_graph().edge_index()[1]).long(), N, dtype=torch.long))


def _pna() -> torch.nn.Module:
    import torch_geometric.nn as pyg

    deg = pna_histogram()
    return pyg.PNAConv(F_IN, OUT, ["mean", "min", "max", "std"], ["identity", "amplification", "attenuation"], deg,
                       edge_dim=D_EDGE, towers=1)


def _propagate_layers() -> dict:
    """Convs without an (x_src, x_dst) pair: their own forward, the halo fetched at each propagate."""
    import torch_geometric.nn as pyg

    mlp = lambda a, b: torch.nn.Sequential(torch.nn.Linear(a, 8), torch.nn.ReLU(), torch.nn.Linear(8, b))
    return {
        "GCNConv": (lambda: pyg.GCNConv(F_IN, OUT), ()),
        "GCNConv-weighted": (lambda: pyg.GCNConv(F_IN, OUT, improved=True), ("edge_weight",)),
        "ChebConv": (lambda: pyg.ChebConv(F_IN, OUT, K=3), ()),
        "ChebConv-none": (lambda: pyg.ChebConv(F_IN, OUT, K=2, normalization=None), ("edge_weight",)),
        "SGConv": (lambda: pyg.SGConv(F_IN, OUT, K=2), ()),
        "SSGConv": (lambda: pyg.SSGConv(F_IN, OUT, alpha=0.1, K=2), ()),
        "APPNP": (lambda: Adapted(pyg.APPNP(K=3, alpha=0.1), lambda c, x, e: c(torch.tanh(x), e)), ()),
        "TAGConv": (lambda: pyg.TAGConv(F_IN, OUT, K=2), ()),
        "GCN2Conv": (lambda: Adapted(pyg.GCN2Conv(F_IN, alpha=0.1, theta=0.5, layer=2),
                                     lambda c, x, e: c(x, 2 * x, e)), ()),
        "ARMAConv": (lambda: pyg.ARMAConv(F_IN, OUT, num_stacks=2, num_layers=2), ()),
        "GatedGraphConv": (lambda: pyg.GatedGraphConv(OUT + 3, 2), ("edge_weight",)),
        "MixHopConv": (lambda: pyg.MixHopConv(F_IN, OUT, powers=[0, 1, 2]), ()),
        "LGConv": (lambda: pyg.LGConv(), ()),
        "ClusterGCNConv": (lambda: pyg.ClusterGCNConv(F_IN, OUT), ()),
        "PNAConv": (_pna, ("edge_attr",)),
        "AGNNConv": (lambda: pyg.AGNNConv(requires_grad=True), ()),
        "FAConv": (lambda: Adapted(pyg.FAConv(F_IN, eps=0.2), lambda c, x, e: c(x, 0.5 * x, e)), ()),
        "SuperGATConv": (lambda: pyg.SuperGATConv(F_IN, OUT, heads=2), ()),
        "EGConv": (lambda: pyg.EGConv(F_IN, 8, aggregators=["sum", "mean", "std", "symnorm"], num_heads=2,
                                      num_bases=2), ()),
        "PDNConv": (lambda: pyg.PDNConv(F_IN, OUT, D_EDGE, 6), ("edge_attr",)),
        "DNAConv": (lambda: Adapted(pyg.DNAConv(F_IN, heads=1, groups=1),
                                    lambda c, x, e: c(torch.stack([x, torch.tanh(x)], 1), e)), ()),
        "PointGNNConv": (lambda: Adapted(pyg.PointGNNConv(mlp(F_IN, 3), mlp(F_IN + 3, F_IN), mlp(F_IN, F_IN)),
                                         lambda c, x, e: c(x, x[:, :3], e)), ()),
        "RGATConv": (lambda: Adapted(pyg.RGATConv(F_IN, OUT, num_relations=2),
                                     lambda c, x, e, edge_weight: c(x, e, (edge_weight > 1).long())),
                     ("edge_weight",)),
    }


def _mlp_to(d_in: int, d_out: int) -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(d_in, 8), torch.nn.ReLU(), torch.nn.Linear(8, d_out))


def _models() -> dict:
    from torch_geometric.nn import models

    return {
        "GraphSAGE": (lambda: models.GraphSAGE(F_IN, 8, num_layers=2, out_channels=CLASSES), ()),
        "GAT": (lambda: models.GAT(F_IN, 8, num_layers=2, out_channels=CLASSES, heads=2), ()),
        "GIN+BatchNorm": (lambda: models.GIN(F_IN, 8, num_layers=2, out_channels=CLASSES, norm="batch_norm"), ()),
        # GCNConv's lin(X) of the input features: its halo is lin(the input cache's rows), no exchange
        "GCN": (lambda: models.GCN(F_IN, 8, num_layers=2, out_channels=CLASSES), ()),
        # ... and with weights of the user's: no fused product reads it, so lin(X) is mapped before the exchange
        "GCN-weighted": (lambda: models.GCN(F_IN, 8, num_layers=2, out_channels=CLASSES), ("edge_weight",)),
    }


class GINEStyle(gd.nn.MessagePassing):  # docs/layers.md's edge-tensor example, verbatim
    def __init__(self, mlp, d_in, d_edge):
        super().__init__(aggr="sum")
        self.nn, self.lin = mlp, torch.nn.Linear(d_edge, d_in)
        self.eps = torch.nn.Parameter(torch.zeros(1))

    def forward(self, x, graph, edge_attr):
        e = self.lin(edge_attr)                 # one row per edge, in the stored order
        return self.nn(self.propagate(graph, x=x, e=e) + (1 + self.eps) * x)

    def message(self, x_j, e):                 # e: this block's edges' rows
        return torch.relu(x_j + e)


def _gine_port() -> torch.nn.Module:
    """The docs' GINE-style layer with PyG's GINEConv's weights (the same parameter names)."""
    twin = _layers()["GINEConv"][0]()  # first after the seed, as the reference is built
    layer = GINEStyle(_mlp(F_IN), F_IN, D_EDGE)
    layer.load_state_dict(twin.state_dict())
    return layer


def cases() -> dict:
    """Every case: layers (the input needs a gradient, so halo gradients cross ranks), whole models (called on
    the graph's own features, as the trainer calls them: the input cache), and the docs' GINE-style port
    (gd.nn.MessagePassing with an edge tensor through propagate), held to PyG's GINEConv."""
    return {**{k: (*v, "layer") for k, v in {**_layers(), **_propagate_layers()}.items()},
            **{k: (*v, "model") for k, v in _models().items()},
            "GINEStyle (port)": (_gine_port, ("edge_attr",), "port")}


def build(name: str, reference: bool = False) -> torch.nn.Module:
    """The case's module, with the same weights wherever it is built; train mode, no dropout anywhere.

    A port's reference is the PyG layer it ports."""
    torch.manual_seed(0)
    if reference and cases()[name][2] == "port":
        return _layers()["GINEConv"][0]()
    return cases()[name][0]()


def edge_tensors(name: str, attr: torch.Tensor, weight: torch.Tensor) -> dict:
    return {k: {"edge_attr": attr, "edge_weight": weight}[k] for k in cases()[name][1]}


def readout(out: torch.Tensor, gids: torch.Tensor) -> torch.Tensor:
    """A loss whose gradient differs per node and column (tests/message_cases.py's)."""
    from tests.message_cases import readout as message_readout

    return message_readout(out, gids)


def reference(name: str, g: Graph) -> dict:
    """The unwrapped layer on the whole graph in one process, float64: output, input and parameter gradients."""
    module = build(name, reference=True).double()
    src, dst = g.edge_index()
    ei = torch.stack([torch.from_numpy(src), torch.from_numpy(dst)]).long()
    x = torch.from_numpy(g.x).double().requires_grad_(cases()[name][2] != "model")
    edges = edge_tensors(name, torch.from_numpy(g.edge_attr).double(), torch.from_numpy(g.edge_weight).double())
    out = module(x, ei, **edges)
    readout(out, torch.arange(N)).backward()
    res = {"out": out.detach().numpy(),
           **{f"grad_{k}": p.grad.numpy() for k, p in module.named_parameters() if p.grad is not None}}
    if x.requires_grad:
        res["grad_x"] = x.grad.numpy()
    return res


def attention_reference(g: Graph) -> dict:
    """PyG's GATConv (2 heads) on the whole graph: {(global source, global destination): weights}."""
    import torch_geometric.nn as pyg

    torch.manual_seed(0)
    conv = pyg.GATConv(F_IN, OUT, heads=2).double()
    src, dst = g.edge_index()
    ei = torch.stack([torch.from_numpy(src), torch.from_numpy(dst)]).long()
    _, (edges, alpha) = conv(torch.from_numpy(g.x).double(), ei, return_attention_weights=True)
    return {(int(s), int(d)): a for s, d, a in zip(*edges.numpy(), alpha.detach().numpy())}
