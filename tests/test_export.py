"""`gd.nn.to_pyg`: a built-in model or a single built-in conv as torch_geometric's, same weights, same output."""
from __future__ import annotations

import pytest
import torch

from gnn_dist.data.synthetic import sbm
from gnn_dist.graph.local import LocalGraph


@pytest.mark.parametrize("name, kwargs", [("GCNConv", {}), ("SAGEConv", {}), ("GATConv", {"heads": 2}),
                                          ("GINConv", {"eps": 0.3})])
def test_to_pyg_exports_a_single_builtin_conv(name, kwargs):
    """`gd.nn.to_pyg` on one conv gives torch_geometric's, same weights, same output (one process)."""
    import gnn_dist as gd

    part = LocalGraph.from_graph(sbm(nodes=50, avg_degree=4, features=6, classes=3, seed=0))
    if name == "GINConv":  # GIN takes its MLP
        conv = gd.nn.GINConv(torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.ReLU()), **kwargs).eval()
    else:
        conv = getattr(gd.nn, name)(6, 4, **kwargs).eval()
    twin = gd.nn.to_pyg(conv)
    assert type(twin).__module__.startswith("torch_geometric") and not twin.training
    torch.testing.assert_close(twin(part.x, part.edges()["edge_index"]), conv(part.x, part), rtol=1e-5, atol=1e-6)
    with pytest.raises(TypeError, match="not Linear"):
        gd.nn.to_pyg(torch.nn.Linear(2, 2))
