"""`gnn-dist info DIR`: the partition's stats table, read back from disk and verified."""
from __future__ import annotations

import argparse


def add_parser(sub) -> None:
    p = sub.add_parser("info", help="show a partition directory's stats",
                       description="Print the stats table of a partition directory after checking its checksums.")
    p.add_argument("path", help="partition directory")
    p.add_argument("--no-verify", action="store_true", help="skip the sha256 check of every file")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from partition import format_stats
    from partition.store import read_meta, verify_partition

    meta = read_meta(args.path) if args.no_verify else verify_partition(args.path)
    print(f"{args.path}: {meta.get('graph')} ({meta['num_nodes']} nodes, {meta.get('num_edges')} edges), "
          f"{meta['num_parts']} parts by {meta.get('method')}, format v{meta['format_version']}"
          + ("" if args.no_verify else ", checksums ok"))
    if "stats" in meta:
        print(format_stats(meta["stats"], meta["parts"]))
    return 0
