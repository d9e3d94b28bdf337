"""Does the same seed give the same partition? Each method run several times: halo per run, distinct results, time.

    python scripts/bench_determinism.py [--grid 400 | --dataset SPEC] [--parts 8] [--runs 3] [--threads T]

The default graph is a 400 x 400 grid (a mesh) with shuffled node ids. Mt-KaHyPar's default preset
(`--fast-nondeterministic`) races its threads; its deterministic preset (the default of `gnn-dist
partition`) and the other methods give one partition per seed. Runs share one process, as the threads race
within one process as well as across processes. `--threads` sets Mt-KaHyPar's thread count (default: every
core); the `first` column (the first run's digest) shows whether the thread count changes the result.
"""
from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from partition import assign_parts  # noqa: E402
from partition.graph import Graph  # noqa: E402

METHODS = (("metis vol", "metis", {"objective": "vol"}),
           ("mtkahypar vol", "mtkahypar", {"objective": "vol"}),
           ("mtkahypar vol fast", "mtkahypar", {"objective": "vol", "deterministic": False}),
           ("mtkahypar cut", "mtkahypar", {"objective": "cut"}),
           ("mtkahypar cut fast", "mtkahypar", {"objective": "cut", "deterministic": False}),
           ("fennel", "fennel", {}))


def grid(side: int) -> Graph:
    ids = np.random.default_rng(0).permutation(side * side).reshape(side, side)
    a = np.r_[ids[:, :-1].ravel(), ids[:-1, :].ravel()]
    b = np.r_[ids[:, 1:].ravel(), ids[1:, :].ravel()]
    n = side * side
    none = np.zeros(n, bool)
    return Graph.from_edges(np.r_[a, b], np.r_[b, a], n, np.zeros((n, 0), np.float32), np.full(n, -1), none, none,
                            none, name=f"grid-{side}x{side}")


def halo_rows(g: Graph, parts: np.ndarray, num_parts: int) -> int:
    """Rows received per layer over all parts: distinct (source node, other part holding one of its targets)."""
    src, dst = g.edge_index()
    away = parts[src] != parts[dst]
    return int(np.unique(src[away] * num_parts + parts[dst][away]).shape[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--grid", type=int, default=400, help="side of the shuffled grid (ignored with --dataset)")
    ap.add_argument("--dataset", default=None, help="a data set spec instead of the grid")
    ap.add_argument("--parts", type=int, default=8)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None, help="Mt-KaHyPar's threads (default: every core)")
    a = ap.parse_args()
    if a.threads:
        from partition.backends import _mtkahypar

        _mtkahypar(a.threads)  # initialised once per process: with this many threads
    if a.dataset:
        from gnn_dist.data import load_dataset

        g = load_dataset(a.dataset)
    else:
        g = grid(a.grid)
    print(f"{g.name}: {g.num_nodes} nodes, {g.num_edges} edges, {a.parts} parts, seed {a.seed}, {a.runs} runs")
    print(f"{'method':<20} {'halo rows per run':<28} {'distinct':>8} {'first':>8} {'mean s':>7}")
    for label, method, kw in METHODS:
        halos, digests, seconds = [], [], []
        for _ in range(a.runs):
            t = time.perf_counter()
            parts = assign_parts(g, a.parts, method, seed=a.seed, **kw)
            seconds.append(time.perf_counter() - t)
            digests.append(hashlib.sha256(parts.astype(np.int32).tobytes()).hexdigest()[:8])
            halos.append(halo_rows(g, parts, a.parts))
        print(f"{label:<20} {' / '.join(f'{h:,}' for h in halos):<28} {len(set(digests)):>8} {digests[0]:>8} "
              f"{np.mean(seconds):>7.1f}")


if __name__ == "__main__":
    main()
