"""DGL graphs in and out: a homogeneous `dgl.DGLGraph` <-> the torch-free `Graph` every loader produces.

dgl is an optional extra (`pip install 'gnn-dist[dgl]'`). Its last release for Python 3.11 on the package
registry, 2.1.0, loads only with torch 2.0-2.2.1 (`import dgl` loads graphbolt, built per torch version), so
these run in CI's second environment, torch 2.2.1 (.ci/interop); with a newer torch, `import dgl` fails and
they say so in one line.
"""
from __future__ import annotations

import numpy as np

from partition.book import SPLIT_KEYS as MASKS
from partition.errors import DataError, MissingExtraError, UsageError
from partition.graph import Graph


def import_dgl():
    """dgl, or one line saying why it cannot be had here."""
    try:
        import dgl
    except ImportError as e:
        if getattr(e, "name", None) == "dgl":
            raise MissingExtraError("DGL interop", "dgl", "dgl") from None
        raise UsageError(f"dgl does not import with torch here ({str(e).splitlines()[0][:120]}); dgl 2.1.0 needs "
                         f"torch 2.0-2.2.1") from None
    except Exception as e:  # a graphbolt library missing for this torch, and the like
        raise UsageError(f"dgl does not import with torch here ({type(e).__name__}: {str(e).splitlines()[0][:120]}); "
                         f"dgl 2.1.0 needs torch 2.0-2.2.1") from None
    return dgl


def graph_from_dgl(g, name: str = "dgl") -> Graph:
    """A homogeneous `dgl.DGLGraph` with ndata feat (and optional label, train/val/test masks; edata weight, feat)."""
    if len(g.ntypes) != 1 or len(g.etypes) != 1:
        raise DataError(f"DGL graph has node types {g.ntypes} and edge types {g.etypes}; give a homogeneous graph")
    src, dst = (t.numpy() for t in g.edges())
    n = int(g.num_nodes())
    nd, ed = g.ndata, g.edata
    if "feat" not in nd:
        raise DataError("DGL graph has no ndata['feat'] (node features)")
    y = nd["label"].numpy() if "label" in nd else np.full(n, -1)
    masks = [nd[m].numpy().astype(bool) if m in nd else np.zeros(n, bool) for m in MASKS]
    w = ed["weight"].numpy() if "weight" in ed else None
    ea = ed["feat"].numpy() if "feat" in ed else None
    return Graph.from_edges(src, dst, n, nd["feat"].numpy(), y, *masks, edge_weight=w, edge_attr=ea, name=name)


def to_dgl(graph: Graph):
    """The graph as a `dgl.DGLGraph`, its edges in the Graph's order (by destination, then source): ndata feat,
    label and the three masks; edata weight and feat where the graph has them."""
    import torch

    dgl = import_dgl()
    src, dst = graph.edge_index()
    g = dgl.graph((torch.from_numpy(src), torch.from_numpy(np.ascontiguousarray(dst))), num_nodes=graph.num_nodes)
    g.ndata["feat"] = torch.from_numpy(graph.x)
    g.ndata["label"] = torch.from_numpy(graph.y)
    for m in MASKS:
        g.ndata[m] = torch.from_numpy(getattr(graph, m))
    if graph.edge_weight is not None:
        g.edata["weight"] = torch.from_numpy(graph.edge_weight)
    if graph.edge_attr is not None:
        g.edata["feat"] = torch.from_numpy(graph.edge_attr)
    return g
