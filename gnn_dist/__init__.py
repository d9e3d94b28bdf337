"""gnn-dist: distributed full-graph GNN training over METIS partitions with halo exchange.

    import gnn_dist as gd
    with gd.init() as ctx:                           # MPI / torchrun -> torch.distributed; closes at exit
        part = gd.load_partition("out/cora-4", ctx)  # this rank's LocalPart (a LocalGraph with x, y, masks)
        model = gd.nn.build_model("gcn", part.num_features, 16, part.num_classes)
        gd.Trainer(model, part, ctx).fit(epochs=200)

Layers subclass `gd.nn.MessagePassing`; `dir(gd)` and `dir(gd.nn)` list the public API.
"""
import importlib

__version__ = "0.1.0"
# Loaded on first use, so the partitioning commands (numpy, scipy, pymetis) never import torch.
_EXPORTS = {
    "LocalGraph": "gnn_dist.graph.local", "DistContext": "gnn_dist.runtime.launch", "init": "gnn_dist.runtime.launch",
    "load_partition": "gnn_dist.graph.load", "Trainer": "gnn_dist.train.node", "load_typed_partition": "gnn_dist.graph.typed",
    "local_typed": "gnn_dist.graph.typed", "SnapshotSequence": "gnn_dist.graph.dynamic",
    "DynamicTrainer": "gnn_dist.train.dynamic", "LinkTrainer": "gnn_dist.train.link",
    "ExchangeConfig": "gnn_dist.runtime.exchange", "ModelConfig": "gnn_dist.nn.registry",
    "UsageError": "gnn_dist.errors", "LaunchError": "gnn_dist.errors",
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
