"""Layer API: subclass `MessagePassing`, or wrap PyG's own layers in `Distributed`; built-in GCN, GraphSAGE, GAT,
GIN, typed and dynamic models."""
from gnn_dist.nn.conv import GATConv, GCNConv, GINConv, SAGEConv
from gnn_dist.nn.dynamic import GCRN, EvolveGCN, EvolveGCNO, to_pyg_dynamic
from gnn_dist.nn.export import PyGNN, to_pyg
from gnn_dist.nn.message_passing import MessagePassing, segment_softmax
from gnn_dist.nn.models import GNN, MODELS, build_model
from gnn_dist.nn.norm import BatchNorm
from gnn_dist.nn.pyg_part_norms import degree_histogram
from gnn_dist.nn.pyg_wrap import Distributed
from gnn_dist.nn.registry import REGISTRY, ModelConfig
from gnn_dist.nn.typed import HeteroConv, RGCNConv, TypedGNN, TypedLinear

__all__ = [
    "MessagePassing", "segment_softmax", "GCNConv", "SAGEConv", "GATConv", "GINConv", "BatchNorm", "Distributed", "GNN",
    "degree_histogram", "MODELS", "build_model", "PyGNN", "to_pyg", "HeteroConv", "TypedGNN", "RGCNConv", "TypedLinear", "GCRN",
    "EvolveGCN", "EvolveGCNO", "to_pyg_dynamic", "REGISTRY", "ModelConfig",
]
