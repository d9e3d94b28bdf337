"""gnn-dist: distributed full-graph GNN training over METIS partitions with halo exchange.

    import gnn_dist as gd
    with gd.init() as ctx:                           # MPI / torchrun -> torch.distributed; closes at exit
        part = gd.load_partition("out/cora-4", ctx)  # this rank's LocalGraph
        model = gd.nn.build_model("gcn", part.num_features, 16, part.num_classes)
        gd.Trainer(model, part, ctx).fit(epochs=200)

Layers subclass `gd.nn.MessagePassing`; `dir(gd)` and `dir(gd.nn)` list the public API.
"""
import importlib

__version__ = "0.1.0"
# Loaded on first use, so the partitioning commands (numpy, scipy, pymetis) never import torch.
_EXPORTS = {
    "LocalGraph": "gnn_dist.graph", "DistContext": "gnn_dist.launch", "init": "gnn_dist.launch",
    "load_partition": "gnn_dist.loader", "Trainer": "gnn_dist.trainer", "load_hetero_partition": "gnn_dist.hetero",
    "local_hetero": "gnn_dist.hetero", "SnapshotSequence": "gnn_dist.snapshots",
    "TemporalTrainer": "gnn_dist.temporal_trainer", "LinkTrainer": "gnn_dist.link",
    "ExchangeConfig": "gnn_dist.exchange", "ModelConfig": "gnn_dist.nn.registry",
    "InputError": "gnn_dist.errors", "LaunchError": "gnn_dist.errors",
}
__all__ = ["nn", *_EXPORTS]


def __dir__() -> list[str]:
    return sorted(__all__ + ["__version__"])


def __getattr__(name: str):
    if name == "nn":
        return importlib.import_module("gnn_dist.nn")
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'gnn_dist' has no attribute '{name}'")
