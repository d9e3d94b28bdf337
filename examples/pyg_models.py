"""PyG's GCN-family models across ranks, unchanged: convs without an (x_src, x_dst) pair exchange their halo at
each propagate (docs/layers.md). From the repository root:

    gnn-dist partition --dataset cora --parts 2 --out out/cora-2
    mpiexec -n 2 gnn-dist train --partition out/cora-2 --model examples/pyg_models.py:appnp
    python examples/pyg_models.py --model appnp    # the same model and training in one process, plain PyG

Builders (`--model examples/pyg_models.py:<name>`):
    gcn          torch_geometric.nn.models.GCN (--hidden, --layers, --dropout)
    gcn_example  the model of PyG's examples/gcn.py: two GCNConv(cached=True), dropout before each
    gcn_example_uncached   the same without cached=True (normalised again every call)
    gcn2         a GCNII stack as PyG's examples/gcn2_cora.py: Linear, --layers GCN2Conv(alpha=0.1), Linear
    appnp        an MLP, then APPNP(K=10, alpha=0.1), as in the APPNP paper
    sgc          SGConv(K=2) (no weights before its propagations; cached=False, so it propagates every step)
    gcn_gd       `gcn`'s model written with gd.nn.GCNConv instead, for scripts/bench_train.py --compare
"""
from __future__ import annotations

import argparse
import math

import torch
import torch.nn.functional as F
from torch_geometric.nn import APPNP, GCN2Conv, GCNConv, SGConv
from torch_geometric.nn.models import GCN

import gnn_dist as gd


class ExampleGCN(torch.nn.Module):
    """PyG's examples/gcn.py, verbatim in substance: dropout, GCNConv, relu, dropout, GCNConv."""

    def __init__(self, d_in: int, hidden: int, d_out: int, dropout: float, cached: bool = True):
        super().__init__()
        self.conv1 = GCNConv(d_in, hidden, cached=cached)
        self.conv2 = GCNConv(hidden, d_out, cached=cached)
        self.dropout = dropout

    def forward(self, x, edge_index):
        x = F.dropout(x, p=self.dropout, training=self.training)
        x = F.relu(self.conv1(x, edge_index))
        x = F.dropout(x, p=self.dropout, training=self.training)
        return self.conv2(x, edge_index)


class GCNII(torch.nn.Module):
    """PyG's examples/gcn2_cora.py: a linear map in, GCN2Conv layers over x_0 (the first hidden), a linear map out."""

    def __init__(self, d_in: int, hidden: int, d_out: int, layers: int, dropout: float):
        super().__init__()
        self.lin_in, self.lin_out = torch.nn.Linear(d_in, hidden), torch.nn.Linear(hidden, d_out)
        self.convs = torch.nn.ModuleList(GCN2Conv(hidden, alpha=0.1, theta=0.5, layer=i + 1) for i in range(layers))
        self.dropout = dropout

    def forward(self, x, edge_index):
        x = x_0 = F.relu(self.lin_in(F.dropout(x, self.dropout, training=self.training)))
        for conv in self.convs:
            x = F.relu(conv(F.dropout(x, self.dropout, training=self.training), x_0, edge_index))
        return self.lin_out(F.dropout(x, self.dropout, training=self.training))


class APPNPNet(torch.nn.Module):
    """An MLP on each node's own features, then personalised-PageRank propagation: APPNP(K=10, alpha=0.1)."""

    def __init__(self, d_in: int, hidden: int, d_out: int, dropout: float):
        super().__init__()
        self.lin1, self.lin2 = torch.nn.Linear(d_in, hidden), torch.nn.Linear(hidden, d_out)
        self.prop = APPNP(K=10, alpha=0.1)
        self.dropout = dropout

    def forward(self, x, edge_index):
        x = F.relu(self.lin1(F.dropout(x, self.dropout, training=self.training)))
        return self.prop(self.lin2(F.dropout(x, self.dropout, training=self.training)), edge_index)


class SGC(torch.nn.Module):
    """Simplified graph convolution: K propagations of the input features, then one linear map (inside SGConv)."""

    def __init__(self, d_in: int, d_out: int, k: int = 2):
        super().__init__()
        self.conv = SGConv(d_in, d_out, K=k)

    def forward(self, x, edge_index):
        return self.conv(x, edge_index)


class GDGCN(torch.nn.Module):
    """torch_geometric.nn.models.GCN's forward (conv, relu, dropout, ..., conv) with gd.nn.GCNConv layers: the
    same model written with gnn-dist's own conv, to time the wrapped one against."""

    def __init__(self, d_in: int, hidden: int, d_out: int, layers: int, dropout: float):
        super().__init__()
        dims = [d_in] + [hidden] * (layers - 1) + [d_out]
        self.convs = torch.nn.ModuleList(gd.nn.GCNConv(a, b) for a, b in zip(dims, dims[1:]))
        self.dropout = dropout

    def forward(self, x, graph):
        for i, conv in enumerate(self.convs):
            x = conv(x, graph)
            if i < len(self.convs) - 1:
                x = F.dropout(F.relu(x), self.dropout, training=self.training)
        return x


PLAIN = {
    "gcn": lambda f, c, cfg: GCN(f, cfg.hidden, num_layers=cfg.layers, out_channels=c, dropout=cfg.dropout),
    "gcn_example": lambda f, c, cfg: ExampleGCN(f, cfg.hidden, c, cfg.dropout),
    "gcn_example_uncached": lambda f, c, cfg: ExampleGCN(f, cfg.hidden, c, cfg.dropout, cached=False),
    "gcn2": lambda f, c, cfg: GCNII(f, cfg.hidden, c, cfg.layers, cfg.dropout),
    "appnp": lambda f, c, cfg: APPNPNet(f, cfg.hidden, c, cfg.dropout),
    "sgc": lambda f, c, cfg: SGC(f, c),
}


def _distributed(name: str):
    """The builder `--model examples/pyg_models.py:<name>` calls: the plain PyG model, wrapped."""
    def build(num_features: int, num_classes: int, config: "gd.ModelConfig") -> torch.nn.Module:
        return gd.nn.Distributed(PLAIN[name](num_features, num_classes, config))

    build.__name__ = name
    return build


gcn = _distributed("gcn")
gcn_example = _distributed("gcn_example")
gcn_example_uncached = _distributed("gcn_example_uncached")
gcn2 = _distributed("gcn2")
appnp = _distributed("appnp")
sgc = _distributed("sgc")


def gcn_gd(num_features: int, num_classes: int, config: "gd.ModelConfig") -> torch.nn.Module:
    return GDGCN(num_features, config.hidden, num_classes, config.layers, config.dropout)


def train_one_process(name: str, dataset: str = "cora", epochs: int = 200, hidden: int = 16, layers: int = 2,
                      dropout: float = 0.5, lr: float = 0.01, weight_decay: float = 5e-4, seed: int = 0) -> dict:
    """The model in plain PyG, one process, trained as `gnn-dist train` trains (its defaults): per-epoch training
    losses and the final test accuracy."""
    from gnn_dist.data import load_dataset

    g = load_dataset(dataset)
    x, y = torch.from_numpy(g.x), torch.from_numpy(g.y).long()
    edge_index = torch.stack([torch.from_numpy(t) for t in g.edge_index()]).long()
    train, test = torch.from_numpy(g.train_mask), torch.from_numpy(g.test_mask)
    torch.manual_seed(seed)
    config = gd.ModelConfig(hidden=hidden, layers=layers, dropout=dropout)
    model = PLAIN[name](g.num_features, g.num_classes, config)
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    losses = []
    for _ in range(epochs):
        model.train()
        opt.zero_grad()
        loss = F.cross_entropy(model(x, edge_index)[train], y[train])
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    model.eval()
    with torch.no_grad():
        pred = model(x, edge_index).argmax(1)
    return {"losses": losses, "test_acc": float((pred[test] == y[test]).float().mean())}


def main() -> None:
    p = argparse.ArgumentParser(description="One PyG process, to compare with gnn-dist train --model "
                                            "examples/pyg_models.py:<name>")
    p.add_argument("--model", choices=sorted(PLAIN), default="gcn")
    p.add_argument("--dataset", default="cora")
    p.add_argument("--epochs", type=int, default=200)
    p.add_argument("--hidden", type=int, default=16)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--dropout", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    r = train_one_process(a.model, a.dataset, a.epochs, a.hidden, a.layers, a.dropout, seed=a.seed)
    last = r["losses"][-1] if r["losses"] else math.nan
    print(f"PyG, one process, {a.model}: final loss {last:.4f}, test_acc {r['test_acc']:.4f}")


if __name__ == "__main__":
    main()
