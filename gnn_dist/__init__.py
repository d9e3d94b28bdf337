"""gnn-dist: distributed full-graph GNN training over METIS partitions with halo exchange.

    import gnn_dist as gd
    ctx = gd.init()                                  # MPI / torchrun -> torch.distributed
    part = gd.load_partition("out/cora-4", ctx)      # this rank's LocalGraph
    model = gd.nn.build_model("gcn", part.num_features, 16, part.num_classes)
    gd.Trainer(model, part, ctx).fit(epochs=200)
"""
from gnn_dist import nn
from gnn_dist.graph import LocalGraph
from gnn_dist.launch import DistContext, init
from gnn_dist.hetero import load_hetero_partition, local_hetero
from gnn_dist.loader import load_partition
from gnn_dist.snapshots import SnapshotSequence
from gnn_dist.temporal_trainer import TemporalTrainer
from gnn_dist.trainer import Trainer

__version__ = "0.1.0"
__all__ = ["nn", "LocalGraph", "DistContext", "init", "load_partition", "Trainer", "load_hetero_partition",
           "local_hetero", "SnapshotSequence", "TemporalTrainer"]
