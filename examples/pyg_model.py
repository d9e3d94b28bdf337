"""A model of PyG's own classes across ranks, unchanged: gd.nn.Distributed wraps it. From the repository root:

    gnn-dist partition --dataset cora --parts 2 --out out/cora-2
    mpiexec -n 2 gnn-dist train --partition out/cora-2 --model examples/pyg_model.py:build
    python examples/pyg_model.py                 # the same model in one process, plain PyG, to compare

`PyGNet` is plain PyG, forward(x, edge_index). `gd.nn.Distributed` runs each conv on a rank's rows (the halo
comes through the exchange, so --codec, --staleness and the rest apply), turns its BatchNorm1d into
gd.nn.BatchNorm (statistics over every rank's rows) and keeps PyG's state_dict keys, so weights written by
--save-model load into a plain `PyGNet`. Dropout draws per-rank masks.
"""
from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch_geometric.nn import GATConv, SAGEConv

import gnn_dist as gd


class PyGNet(torch.nn.Module):
    """Multi-head attention (GATConv adds self loops), batch norm, then a GraphSAGE layer."""

    def __init__(self, d_in: int, hidden: int, d_out: int, heads: int, dropout: float):
        super().__init__()
        self.conv1 = GATConv(d_in, hidden, heads=heads)
        self.norm = torch.nn.BatchNorm1d(hidden * heads)
        self.conv2 = SAGEConv(hidden * heads, d_out)
        self.dropout = dropout

    def forward(self, x: torch.Tensor, edge_index) -> torch.Tensor:
        x = F.relu(self.norm(self.conv1(x, edge_index)))
        return self.conv2(F.dropout(x, self.dropout, self.training), edge_index)


def build(num_features: int, num_classes: int, config: "gd.ModelConfig") -> torch.nn.Module:
    """What `--model examples/pyg_model.py:build` calls: the PyG model, wrapped (--hidden, --heads, --dropout)."""
    return gd.nn.Distributed(PyGNet(num_features, config.hidden, num_classes, config.heads, config.dropout))


def main() -> None:
    """The same model and training in one process with plain PyG: `gnn-dist train`'s defaults, its test accuracy."""
    from gnn_dist.data import load_dataset

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="cora")
    p.add_argument("--epochs", type=int, default=200)
    p.add_argument("--hidden", type=int, default=16)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--dropout", type=float, default=0.5)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    g = load_dataset(a.dataset)
    x, y = torch.from_numpy(g.x), torch.from_numpy(g.y).long()
    edge_index = torch.stack([torch.from_numpy(t) for t in g.edge_index()]).long()
    train, test = torch.from_numpy(g.train_mask), torch.from_numpy(g.test_mask)
    torch.manual_seed(a.seed)
    model = PyGNet(g.num_features, a.hidden, g.num_classes, a.heads, a.dropout)
    opt = torch.optim.Adam(model.parameters(), lr=a.lr, weight_decay=a.weight_decay)
    for _ in range(a.epochs):
        model.train()
        opt.zero_grad()
        F.cross_entropy(model(x, edge_index)[train], y[train]).backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        pred = model(x, edge_index).argmax(1)
    print(f"PyG, one process: test_acc {float((pred[test] == y[test]).float().mean()):.4f}")


if __name__ == "__main__":
    main()
