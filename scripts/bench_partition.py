"""METIS (cut and volume objectives) against the random and contiguous baselines, in one run.

    python scripts/bench_partition.py [--dataset SPEC] [--parts 4,8]

Prints edge cut, halo volume (sum of halo nodes over parts), their ratios to
`random`, balance, central fraction and the time to assign and build plans.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gnn_dist.data import load_dataset  # noqa: E402
from partition import assign_parts, build_parts, partition_stats  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="sbm:nodes=100000,avg_degree=20,homophily=0.9")
    ap.add_argument("--parts", default="4,8")
    a = ap.parse_args()
    g = load_dataset(a.dataset)
    print(f"{a.dataset}: {g.num_nodes} nodes, {g.num_edges} edges")
    print(f"{'parts':>5} {'method':<12} {'edge cut':>10} {'x random':>8} {'halo':>9} {'x random':>8} "
          f"{'balance':>7} {'central':>7} {'assign s':>8} {'total s':>8}")
    for k in (int(x) for x in a.parts.split(",")):
        rows = {}
        for label, method, kw in (("random", "random", {}), ("contiguous", "contiguous", {}),
                                  ("metis-cut", "metis", {"objective": "cut"}), ("metis-vol", "metis", {"objective": "vol"})):
            t = time.perf_counter()
            parts = assign_parts(g, k, method, **kw)
            t_assign = time.perf_counter() - t
            per = [dict(inner=p.num_inner, halo=p.num_halo, central=p.num_central, edges=p.num_edges)
                   for p in build_parts(g, parts, k)]
            rows[label] = (partition_stats(g, parts, per), t_assign, time.perf_counter() - t)
        r = rows["random"][0]
        for label, (s, ta, tt) in rows.items():
            print(f"{k:>5} {label:<12} {s['edge_cut']:>10} {s['edge_cut'] / r['edge_cut']:>8.3f} {s['halo_total']:>9} "
                  f"{s['halo_total'] / r['halo_total']:>8.3f} {s['balance']:>7.3f} {s['central_fraction']:>7.3f} "
                  f"{ta:>8.2f} {tt:>8.2f}")


if __name__ == "__main__":
    main()
