"""Interop: PyG Data in; DGL graphs in and out, and DGL's GraphConv against gd.nn.GCNConv.

The DGL tests are marked `interop`. dgl 2.1.0 imports only with torch 2.0-2.2.1, so they skip elsewhere and
run in CI's second environment (.ci/interop, torch 2.2.1), which sets GNN_DIST_INTEROP=1: there a dgl that
does not import fails them instead.
"""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from partition.book import SPLIT_KEYS


def test_pyg_data_with_edge_features_round_trips():
    from torch_geometric.data import Data

    from gnn_dist.data.real import graph_from_pyg

    ei = torch.tensor([[0, 1, 2, 2], [1, 2, 0, 1]])
    data = Data(x=torch.randn(3, 4), edge_index=ei, edge_attr=torch.arange(8.0).view(4, 2), y=torch.tensor([0, 1, 0]))
    g = graph_from_pyg(data)
    src, dst = g.edge_index()
    got = {(int(s), int(d)): tuple(a) for s, d, a in zip(src, dst, g.edge_attr)}
    assert got == {(int(s), int(d)): tuple(a) for s, d, a in zip(ei[0], ei[1], data.edge_attr.numpy())}


@pytest.fixture(scope="module")
def dgl():
    from gnn_dist.data.dgl_interop import import_dgl
    from partition.errors import GnnDistError

    if os.environ.get("GNN_DIST_INTEROP"):
        return import_dgl()
    try:
        return import_dgl()
    except GnnDistError as e:
        pytest.skip(str(e))


def same_graph(a, b) -> None:
    for name in ("indptr", "indices", "x", "y", *SPLIT_KEYS, "edge_weight", "edge_attr"):
        u, v = getattr(a, name), getattr(b, name)
        assert (u is None and v is None) or np.array_equal(u, v), name


@pytest.mark.interop
def test_a_graph_goes_to_dgl_and_back(dgl, cora):
    from gnn_dist.data.dgl_interop import graph_from_dgl, to_dgl

    g = to_dgl(cora)
    assert isinstance(g, dgl.DGLGraph) and (g.num_nodes(), g.num_edges()) == (cora.num_nodes, cora.num_edges)
    assert int(g.ndata["train_mask"].sum()) == 140 and g.in_degrees().tolist() == np.diff(cora.indptr).tolist()
    same_graph(graph_from_dgl(g), cora)


@pytest.mark.interop
def test_a_dgl_graph_comes_in_and_goes_back(dgl):
    """Edges in DGL's own order, with weights and edge features: the same edges and data come back."""
    from gnn_dist.data.dgl_interop import graph_from_dgl, to_dgl

    rng = np.random.default_rng(1)
    src, dst = torch.from_numpy(rng.integers(0, 30, 120)), torch.from_numpy(rng.integers(0, 30, 120))
    g = dgl.graph((src, dst), num_nodes=30)
    g.ndata["feat"], g.ndata["label"] = torch.randn(30, 5), torch.from_numpy(rng.integers(0, 3, 30))
    g.ndata["val_mask"] = torch.arange(30) % 3 == 0
    g.edata["weight"], g.edata["feat"] = torch.rand(120), torch.randn(120, 2)
    ours = graph_from_dgl(g)
    assert ours.num_nodes == 30 and np.array_equal(ours.val_mask, g.ndata["val_mask"].numpy())
    assert not ours.train_mask.any() and np.array_equal(ours.y, g.ndata["label"].numpy())
    back = to_dgl(ours)

    def edges(h) -> list:
        s, d = h.edges()
        return sorted(zip(s.tolist(), d.tolist(), h.edata["weight"].tolist(), map(tuple, h.edata["feat"].tolist())))

    assert edges(back) == edges(g)
    assert torch.equal(back.ndata["feat"], g.ndata["feat"])
    same_graph(graph_from_dgl(back), ours)


@pytest.mark.interop
def test_dgl_graphconv_equals_our_gcnconv_on_cora(dgl, cora):
    """DGL's GraphConv (symmetric norm, self loops added) and gd.nn.GCNConv with the same weights: outputs and
    weight gradients agree."""
    from dgl.nn import GraphConv

    from gnn_dist.data.dgl_interop import to_dgl
    from gnn_dist.graph.local import LocalGraph
    from gnn_dist.nn import GCNConv

    torch.manual_seed(0)
    ours, theirs = GCNConv(cora.num_features, 16), GraphConv(cora.num_features, 16, norm="both")
    with torch.no_grad():
        theirs.weight.copy_(ours.lin.weight.T)
        ours.bias.copy_(torch.randn(16))
        theirs.bias.copy_(ours.bias)
    x = torch.from_numpy(cora.x)
    part = LocalGraph.from_graph(cora)
    order = torch.from_numpy(part.global_ids.astype(np.int64))  # the part's rows, in global ids
    out = ours(x[order], part)
    ref = theirs(dgl.add_self_loop(to_dgl(cora)), x)[order]
    assert torch.allclose(out, ref, rtol=1e-5, atol=1e-6), (out - ref).abs().max()
    (out ** 2).sum().backward()
    (ref ** 2).sum().backward()
    assert torch.allclose(ours.lin.weight.grad, theirs.weight.grad.T, rtol=1e-4, atol=1e-5)
    assert torch.allclose(ours.bias.grad, theirs.bias.grad, rtol=1e-4, atol=1e-5)
