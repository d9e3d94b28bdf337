"""gnn-dist's errors, for runtime code and user scripts (defined torch-free in `partition.errors`)."""
from partition.errors import DataError, GnnDistError, LaunchError, MissingExtraError, PartitionFormatError, UsageError

__all__ = ["GnnDistError", "DataError", "UsageError", "LaunchError", "PartitionFormatError", "MissingExtraError"]
