"""Argument parsing and the one place that turns user errors into one line and exit code 2."""
from __future__ import annotations

import argparse
import sys

from partition.errors import PartitionError


class UsageError(Exception):
    """A bad flag value found after parsing; reported like an argparse error."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, not usage + message
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    from gnn_dist.cli import assign, info, partition_cmd, predict, train

    parser = _Parser(prog="gnn-dist", description="Distributed full-graph GNN training with cheap halo exchange.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for module in (partition_cmd, assign, train, predict, info):
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from gnn_dist.errors import LaunchError

    args = build_parser().parse_args(argv)
    try:
        rc = int(args.run(args) or 0)
    except (PartitionError, UsageError, LaunchError) as e:
        sys.stderr.write(f"gnn-dist {args.command}: error: {e}\n")
        rc = 2
    except KeyboardInterrupt:
        sys.stderr.write(f"gnn-dist {args.command}: interrupted\n")
        rc = 130
    if "torch" in sys.modules:  # leave torch.distributed together, before the interpreter winds down
        from gnn_dist.launch import close_all

        close_all(clean=rc == 0)
    return rc
