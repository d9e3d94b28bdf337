"""Data sets by name: real graphs shipped with gnn-dist or installed packages, and seeded generators.

Every loader returns a torch-free `partition.Graph`. A data set is named as
`cora`, `karate`, `nx:les_miserables_graph` or a generator spec such as
`sbm:nodes=100000,classes=16,avg_degree=20,homophily=0.8,features=128,seed=0`.
"""
from gnn_dist.data.registry import DATASETS, load_dataset, parse_spec

__all__ = ["DATASETS", "load_dataset", "parse_spec"]
