"""PyG layers that cannot run exactly on a part, each with the reason given to the user in one line.

Everything else runs: convs whose forward takes an (x_src, x_dst) pair by blocks of rows
(`gnn_dist.nn.pyg_wrap`), the others through their own forward with the halo fetched at each
`propagate` (`gnn_dist.nn.pyg_propagate`). What is refused here reads something a part does not
hold (all nodes, out-edges, hyperedges), or needs a kernel this install cannot have.
"""
from __future__ import annotations

TYPED = "a typed-graph layer: use gnn-dist's typed API (docs/typed.md), which exchanges per relation"
POSITIONS = "its positions (pos) are a second node input of the pair path, which exchanges x only"
NEIGHBOURS = "it builds its edges from nearest neighbours over all nodes, which no part holds"

REASONS = {
    "FusedGATConv": "it needs dgNN's fused CUDA kernels, which are not shipped",
    "PANConv": "it builds a torch_sparse SparseTensor, and torch_sparse has no wheel for this torch",
    "HypergraphConv": "it propagates over hyperedges (an incidence matrix), not a part's in-edges",
    "MeshCNNConv": "it convolves each mesh edge's fixed neighbours, not a part's in-edges",
    "HGTConv": TYPED,
    "HANConv": TYPED,
    "HEATConv": TYPED,
    "HeteroConv": TYPED,
    "GravNetConv": NEIGHBOURS,
    "DynamicEdgeConv": NEIGHBOURS,
    "XConv": NEIGHBOURS,
    "SignedConv": "it reads two edge sets (positive and negative), and a part holds one",
    "GPSConv": "its global attention reads all nodes, which no part holds",
    "DirGNNConv": "it reads out-edges (edge_index flipped), and a part holds its rows' in-edges",
    "WLConv": "its colours come from a table of the colours one process met first, so ranks would disagree",
    "SplineConv": "it needs torch_spline_conv, which has no wheel for this torch",
    "PointNetConv": POSITIONS,
    "PPFConv": POSITIONS,
    "PointTransformerConv": POSITIONS,
    "CuGraphSAGEConv": "it needs pylibcugraphops (CUDA only), which is not shipped",
    "CuGraphGATConv": "it needs pylibcugraphops (CUDA only), which is not shipped",
    "CuGraphRGCNConv": "it needs pylibcugraphops (CUDA only), which is not shipped",
}


def refusal(cls: type) -> str | None:
    """Why a torch_geometric layer (or a subclass of one) cannot run on a part, or None if it can."""
    for c in cls.__mro__:
        if c.__module__.startswith("torch_geometric.") and c.__name__ in REASONS:
            return REASONS[c.__name__]
    return None
