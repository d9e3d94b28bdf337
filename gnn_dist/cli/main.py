"""Argument parsing, and the one place that turns a user-fixable error into one line and an exit code."""
from __future__ import annotations

import argparse
import os
import sys

from partition.errors import GnnDistError

# Exit codes by error kind (partition.errors): 2 for everything a user can fix, as argparse does for bad flags.
# An error in a user's own code exits 1 (cli.train); an interrupt 130; a lost peer 3. Once ranks are connected,
# the failing rank's code is every rank's (gnn_dist.runtime.launch): mpiexec reports the first non-zero code.
EXIT_CODES = {"usage": 2, "data": 2, "partition-format": 2, "launch": 2, "error": 2}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, not usage + message
        say_error(f"{self.prog}: error: ", message, self.prog.split()[-1])
        sys.exit(end_job(2))


def build_parser() -> argparse.ArgumentParser:
    from gnn_dist.cli import assign, datasets_cmd, info, partition_cmd, predict, profile_machine, train

    parser = _Parser(prog="gnn-dist", description="Distributed full-graph GNN training with cheap halo exchange.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for module in (partition_cmd, assign, train, predict, info, datasets_cmd, profile_machine):
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "debug", False):  # the runtime's one switch for whole tracebacks (gnn_dist.runtime.failure)
        os.environ["GNN_DIST_DEBUG"] = "1"
    try:
        rc = int(args.run(args) or 0)
    except GnnDistError as e:
        say_error(f"gnn-dist {args.command}: error: ", str(e), args.command)
        rc = EXIT_CODES[e.kind]
    except KeyboardInterrupt:  # mpiexec hands Ctrl-C to every rank: one line for them all
        say_error(f"gnn-dist {args.command}: ", "interrupted", args.command)
        rc = 130
    if "torch" in sys.modules:  # leave torch.distributed together; on a failure, every peer leaves with rc
        from gnn_dist.runtime.launch import close_all

        close_all(rc)
    return end_job(rc)


# the commands that start MPI on every rank of an mpiexec launch: only there may an error start it to tell the
# peers (MPI_Init waits for every rank; a peer of `partition`, say, may never start it)
MPI_COMMANDS = ("train", "predict", "assign")


def say_error(head: str, message: str, command: str) -> None:
    """One line; under mpiexec, once for every rank that met the same error (gnn_dist.runtime.alike)."""
    from gnn_dist.runtime import alike

    alike.report(message, lambda who, text: f"{who}{head}{text}", start_mpi=command in MPI_COMMANDS)


def end_job(rc: int) -> int:
    """`rc`; a failure under mpiexec first ends every rank with it (MPI_Abort), so that ranks left quiet by
    `say_error`, and ranks that met no error, leave now with this code instead of waiting for their peers."""
    if rc and rc != 130 and "mpi4py.MPI" in sys.modules:  # (importing mpi4py would start MPI)
        from gnn_dist.runtime.alike import mpi_abort, mpi_world

        if mpi_world():
            mpi_abort(rc)
    return rc
