"""The one error hierarchy of gnn-dist: every problem a user can fix is a `GnnDistError` of one kind.

It lives in the torch-free partitioner because `partition` imports nothing from `gnn_dist`;
`gnn_dist.errors` is the same classes under the runtime's name. A CLI prints such an error as one line
and maps its `kind` to an exit code in one place (`gnn_dist.cli.main.EXIT_CODES`). Anything else that
escapes (a bug, an error in a user's own layer) is not one of these, and is reported as such.
"""
from __future__ import annotations


class GnnDistError(Exception):
    """A problem the user can fix; the message names it in one line."""

    kind = "error"


class DataError(GnnDistError, ValueError):
    """Input data cannot be used as given: a missing file, a wrong layout, an out-of-range id, a NaN."""

    kind = "data"


class UsageError(GnnDistError, ValueError):
    """Flags, settings or names that cannot work, alone or together (an unknown model, --parts 0)."""

    kind = "usage"


class LaunchError(GnnDistError, RuntimeError):
    """The job cannot start, or go on, as launched: wrong rank count, no GPU for NCCL, no interface."""

    kind = "launch"


class PartitionFormatError(DataError):
    """A partition directory is missing, corrupt, of another version, or of another kind of graph."""

    kind = "partition-format"


class MissingExtraError(UsageError):
    """An optional extra is not installed; the message names the pip extra that brings it."""

    def __init__(self, what: str, package: str, extra: str):
        super().__init__(f"{what} needs the {package} package: pip install 'gnn-dist[{extra}]'")
        self.extra = extra
