"""gnn-dist: distributed full-graph GNN training over METIS partitions with halo exchange."""
__version__ = "0.1.0"
