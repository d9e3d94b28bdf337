"""Interop: PyG Data in, DGL graphs in (where dgl imports)."""
from __future__ import annotations

import numpy as np
import pytest
import torch


def test_pyg_data_with_edge_features_round_trips():
    from torch_geometric.data import Data

    from gnn_dist.data.real import graph_from_pyg

    ei = torch.tensor([[0, 1, 2, 2], [1, 2, 0, 1]])
    data = Data(x=torch.randn(3, 4), edge_index=ei, edge_attr=torch.arange(8.0).view(4, 2), y=torch.tensor([0, 1, 0]))
    g = graph_from_pyg(data)
    src, dst = g.edge_index()
    got = {(int(s), int(d)): tuple(a) for s, d, a in zip(src, dst, g.edge_attr)}
    assert got == {(int(s), int(d)): tuple(a) for s, d, a in zip(ei[0], ei[1], data.edge_attr.numpy())}


def test_dgl_graph_converts():
    try:
        import dgl
    except Exception as e:  # dgl 2.1.0 (newest here) fails to import on torch 2.13
        pytest.skip(f"dgl does not import here: {type(e).__name__}: {str(e).splitlines()[0][:80]}")
    from gnn_dist.data.real import graph_from_dgl

    g = dgl.graph((torch.tensor([0, 1, 2]), torch.tensor([1, 2, 0])))
    g.ndata["feat"] = torch.randn(3, 5)
    g.ndata["label"] = torch.tensor([0, 1, 1])
    out = graph_from_dgl(g)
    assert out.num_nodes == 3 and out.num_edges == 3 and np.array_equal(out.y, [0, 1, 1])
