"""Torch-free graph partitioning for gnn-dist.

Runs on a big-memory CPU box with numpy, scipy and pymetis alone: it turns a
`Graph` into a partition directory that the training ranks load.
"""
from partition.book import PartitionBook
from partition.build import PartPlan, build_parts
from partition.errors import DataError, GnnDistError, PartitionFormatError, UsageError
from partition.graph import Graph
from partition.methods import METHODS, assign_parts
from partition.stats import format_stats, partition_stats
from partition.store import FORMAT_VERSION, read_meta, read_part, write_partition

PARTITIONER_OF = "gnn-dist"  # gnn_dist reads this line at import: another package installed over this folder lacks it
__all__ = [
    "Graph", "GnnDistError", "DataError", "UsageError", "PartitionFormatError", "METHODS", "assign_parts",
    "PartPlan", "build_parts",
    "partition_stats", "format_stats", "FORMAT_VERSION", "read_meta", "read_part",
    "write_partition", "PartitionBook",
]
