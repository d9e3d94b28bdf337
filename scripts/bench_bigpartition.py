"""Partitioning a big graph: METIS against streaming (Fennel, LDG) — time, peak memory, cut, halo.

Each method runs `gnn-dist partition` in its own process on the same seeded
R-MAT graph (generation included in wall time and memory; the table also
gives the assignment time alone), and the table is printed from one run:

    python scripts/bench_bigpartition.py [--dataset rmat:scale=20,edges=10000000] [--parts 8]
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNS = {"metis": [], "fennel": [], "fennel, 2 passes": ["--passes", "2"], "ldg": [], "random": []}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="rmat:scale=20,edges=10000000,features=16,seed=0")
    ap.add_argument("--parts", type=int, default=8)
    ap.add_argument("--only", default=None, help="comma-separated subset of: " + ", ".join(RUNS))
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for name, extra in RUNS.items():
            if a.only and name not in a.only.split(","):
                continue
            out = Path(d) / name.replace(" ", "").replace(",", "")
            method = name.split(",")[0]
            cmd = ["/usr/bin/time", "-f", "maxrss_kb=%M", sys.executable, "-m", "gnn_dist", "partition",
                   "--dataset", a.dataset, "--parts", str(a.parts), "--method", method, "--out", str(out), *extra]
            t = time.perf_counter()
            r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
            wall = time.perf_counter() - t
            if r.returncode != 0:
                sys.exit(f"{name} failed:\n{r.stderr[-2000:]}")
            rss = int(re.search(r"maxrss_kb=(\d+)", r.stderr).group(1)) / 1024
            assign = float(re.search(r"assign ([\d.]+)s", r.stderr).group(1))
            meta = json.loads((out / "partition.json").read_text())
            s = meta["stats"]
            rows.append((name, wall, assign, rss, s["edge_cut"], s["edge_cut_fraction"], s["halo_total"], s["balance"]))
            print(f"[bench] {name}: {wall:.1f}s", file=sys.stderr, flush=True)
            import shutil

            shutil.rmtree(out)
    print(f"\n{a.dataset}: {meta['num_nodes']} nodes, {meta['num_edges']} edges, {a.parts} parts")
    base = next((r for r in rows if r[0] == "metis"), rows[0])
    print("| method | wall s | assign s | peak RSS MB | edge cut | cut fraction | halo rows | x METIS halo | balance |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, wall, assign, rss, cut, frac, halo, bal in rows:
        print(f"| {name} | {wall:.1f} | {assign:.1f} | {rss:.0f} | {cut} | {frac:.3f} | {halo} | {halo / base[6]:.2f} | {bal:.3f} |")


if __name__ == "__main__":
    main()
