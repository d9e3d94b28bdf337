"""The `gnn-dist` console script: one entry, one module per subcommand."""
from gnn_dist.cli.main import main

__all__ = ["main"]
