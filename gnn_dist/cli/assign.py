"""`gnn-dist assign`: streaming part assignment as MPI ranks that each read a share of the edge chunks.

For edge lists too big for one machine's METIS run: ranks hold O(E / R) edges
each (plus one part id per node) and write a node -> part array, which
`gnn-dist partition --assignment` turns into a partition directory.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from gnn_dist import progress
from partition.errors import DataError, UsageError


def add_parser(sub) -> None:
    p = sub.add_parser("assign", help="streaming part assignment over MPI ranks, each reading some edge chunks",
                       description="Assign nodes to parts with Fennel or LDG, run as `mpiexec -n R gnn-dist assign "
                                   "...`: chunk file i is read by rank i mod R, each rank streams the nodes of its id "
                                   "range, and rank 0 writes the node -> part array. Then: `gnn-dist partition "
                                   "--dataset edges:SPEC --assignment PARTS.npy --parts K --out DIR`.")
    p.add_argument("--edges", required=True, help="edge list chunks: a file, a glob or a folder of .csv/.tsv/.txt/"
                                                  ".npy/.npz files (one 'src dst' pair per row)")
    p.add_argument("--parts", type=int, required=True, help="number of parts")
    p.add_argument("--method", default="fennel", choices=["fennel", "ldg"], help="streaming score (default fennel)")
    p.add_argument("--passes", type=int, default=1, help="passes over the nodes; later ones refine (restreaming)")
    p.add_argument("--nodes", type=int, default=None, help="number of nodes (default: largest id seen + 1)")
    p.add_argument("--seed", type=int, default=0, help="seed of the streaming order (default 0)")
    p.add_argument("--out", required=True, help="output .npy file: the part of every node, int32")
    p.add_argument("--force", action="store_true", help="replace an existing --out")
    progress.add_flag(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from mpi4py import MPI

    from partition.edgelist import chunk_files
    from partition.mpi_stream import agree, mpi_stream_parts
    from partition.store import write_atomic

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    out = Path(args.out)

    def check():
        if args.parts < 1:
            raise UsageError(f"--parts must be at least 1, got {args.parts}")
        if args.passes < 1:
            raise UsageError(f"--passes must be at least 1, got {args.passes}")
        progress.flag_mode(args)
        if args.nodes is not None and args.nodes < 1:
            raise UsageError(f"--nodes must be at least 1, got {args.nodes}")
        if rank == 0 and out.exists() and not args.force:
            raise UsageError(f"{out} exists; pass --force to replace it")
        if rank == 0 and not out.parent.is_dir():
            raise DataError(f"folder {out.parent} does not exist")
        return chunk_files(args.edges)

    files = agree(comm, check)
    if rank == 0:
        sys.stderr.write(f"[gnn-dist] {len(files)} edge chunk file(s) over {size} rank(s); {args.method}, "
                         f"{args.passes} pass(es), {args.parts} parts\n")
    bar = progress.Progress(None, "streaming", "rounds", progress.flag_mode(args) if rank == 0 else "none")
    res = mpi_stream_parts(comm, files, args.parts, args.method, args.passes, args.seed, args.nodes,
                           on_round=bar.update)
    bar.close()
    if rank == 0:
        write_atomic(out, lambda f: np.save(f, res.parts))
        print(f"nodes {res.num_nodes}  edges {res.num_edges}  parts {args.parts}  ranks {size}\n"
              f"cut fraction {res.cut_fraction:.4f}  balance {res.balance:.3f}\n"
              f"read+shuffle {res.read_s:.1f}s  assign {res.assign_s:.1f}s  "
              f"peak RSS per rank MB {'/'.join(f'{m:.0f}' for m in res.peak_rss_mb)}")
        sys.stderr.write(f"[gnn-dist] wrote {out}\n")
    return 0
