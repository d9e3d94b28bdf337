"""Candidates for the default partition, priced offline, then measured: docs/benchmarks.md ("The default
partition against node-balanced METIS").

    python scripts/bench_default_partition.py candidates --dataset rmat:scale=18,edges=4000000 --ranks 4 \\
        --machine M.json --save DIR [--mtkahypar]
    python scripts/bench_default_partition.py medians R.jsonl

`candidates` partitions the graph many ways without training (METIS's cut and volume objectives, node counts
or one weight column mixing each node's cost (as --machine prices it) with a node count, `alpha * cost / mean cost + (1 - alpha)`;
optionally Mt-KaHyPar's connectivity objective), prints each one's counts and the cost model's prediction
with --machine (a measured profile, e.g. the lab's) and with the shipped profile, and saves each assignment
as DIR/NAME.npy, so the most promising few can be measured with
`bench_costmodel.py run ... --assignment DIR/NAME.npy`. `medians` prints each partition's measured epochs
from a bench_costmodel results file, their median against node-balanced METIS (`--balance nodes`), the
ranks' compute over the cores (what shared cores floor the epoch at) and the test accuracy.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ALPHAS = (0.25, 0.5, 0.75)  # the cost's share of the weight column (the default's is 0.5)


def weight(cost: np.ndarray, alpha: float) -> np.ndarray:
    from partition.cost_parts import combined_weight

    return combined_weight(cost, alpha)[:, None]


def candidates(a: argparse.Namespace) -> None:
    from gnn_dist.data import load_dataset
    from partition.costmodel import Workload, node_seconds, predict
    from partition.machine import DEFAULT, load
    from partition.methods import metis_parts, mtkahypar_parts
    from partition.part_counts import part_counts

    graph = load_dataset(a.dataset, seed=0)
    machine = load(a.machine)
    work = Workload(graph.num_features, graph.num_classes, a.hidden, a.layers)
    src, dst = graph.edge_index()
    cost = node_seconds(graph.in_degree(), work, machine)  # each node's cost as --machine prices it
    makers = {f"{obj}-nodes": (lambda obj=obj: metis_parts(graph, a.ranks, objective=obj)) for obj in ("cut", "vol")}
    makers.update({f"{obj}-w{alpha}": (lambda obj=obj, alpha=alpha: metis_parts(graph, a.ranks, objective=obj,
                                                                                 vweights=weight(cost, alpha)))
                   for obj in ("cut", "vol") for alpha in ALPHAS})
    if a.mtkahypar:
        makers["km1-w0.5"] = lambda: mtkahypar_parts(graph, a.ranks, objective="vol", vweights=weight(cost, 0.5))
    save = Path(a.save)
    save.mkdir(parents=True, exist_ok=True)
    print("| candidate | nodes / edges max/mean | rows received (sent) max | halo total | predicted s, "
          f"'{machine.name}' | predicted s, shipped | seconds to partition |")
    print("|---|---|---|---|---|---|---|")
    for name, make in makers.items():
        t0 = time.perf_counter()
        parts = np.asarray(make(), dtype=np.int32)
        took = time.perf_counter() - t0
        np.save(save / f"{name}.npy", parts)
        counts = part_counts(src, dst, parts, a.ranks)
        col = lambda key: np.array([c[key] for c in counts], dtype=float)  # noqa: E731
        ratio = lambda key: col(key).max() / col(key).mean()  # noqa: E731
        print(f"| {name} | {ratio('inner'):.3f} / {ratio('edges'):.3f} | {int(col('halo').max()):,} "
              f"({int(col('sent').max()):,}) | {int(col('halo').sum()):,} | {predict(counts, work, machine).epoch_s:.4f} | "
              f"{predict(counts, work, DEFAULT).epoch_s:.4f} | {took:.1f} |", flush=True)


def medians(path: str) -> None:
    rows = [json.loads(x) for x in Path(path).read_text().splitlines() if x.strip()]
    by: dict[str, list] = {}
    for r in rows:
        by.setdefault(r["balance"], []).append(r)
    if "nodes" not in by:
        raise SystemExit(f"{path}: no node-balanced run (--balance nodes) to compare with")
    base = statistics.median(r["epoch_s"] for r in by["nodes"])
    print("| partition | measured epoch s, in run order | median | x node-balanced | ranks' compute / 2 cores, median "
          "| test accuracy |")
    print("|---|---|---|---|---|---|")
    for name, rs in by.items():
        epochs = [r["epoch_s"] for r in rs]
        floor = statistics.median(sum(r["rank_compute_s"]) / 2 for r in rs)
        accs = sorted({round(r["test_acc"], 4) for r in rs})
        print(f"| {name} | {', '.join(f'{e:.4f}' for e in epochs)} | {statistics.median(epochs):.4f} | "
              f"{statistics.median(epochs) / base:.2f} | {floor:.4f} | {', '.join(map(str, accs))} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("candidates")
    c.add_argument("--dataset", required=True)
    c.add_argument("--ranks", type=int, default=4)
    c.add_argument("--machine", default=None, help="profile to price with besides the shipped one")
    c.add_argument("--hidden", type=int, default=16)
    c.add_argument("--layers", type=int, default=2)
    c.add_argument("--save", required=True, help="folder for each candidate's assignment (NAME.npy)")
    c.add_argument("--mtkahypar", action="store_true", help="also Mt-KaHyPar's connectivity objective (slow)")
    m = sub.add_parser("medians")
    m.add_argument("results")
    a = ap.parse_args()
    candidates(a) if a.cmd == "candidates" else medians(a.results)


if __name__ == "__main__":
    main()
