"""`gnn-dist datasets`: every data set name and file format, with what each needs on disk."""
from __future__ import annotations

import argparse


def add_parser(sub) -> None:
    p = sub.add_parser("datasets", help="list the data set names and file formats --dataset takes",
                       description="Every form --dataset takes, the kind of graph it gives and what it needs on disk. "
                                   "Path forms take options after '?': file:g.npz?split=20&seed=1 (see docs/datasets.md).")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from gnn_dist.data.registry import CATALOGUE

    width = max(len(form) for form, *_ in CATALOGUE)
    print(f"{'form':<{width}}  {'kind':<15}  needs on disk / what")
    for form, kind, needs, what in CATALOGUE:
        print(f"{form:<{width}}  {kind:<15}  {needs}: {what}")
    return 0
