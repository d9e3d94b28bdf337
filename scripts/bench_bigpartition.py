"""Partitioning a big graph: METIS against streaming (Fennel, LDG) — time, peak memory, cut, halo.

Each method runs `gnn-dist partition` in its own process on the same seeded
R-MAT graph (generation included in wall time and memory; the table also
gives the assignment time alone), and the table is printed from one run:

    python scripts/bench_bigpartition.py [--dataset rmat:scale=20,edges=10000000] [--parts 8] [--ranks 2]

The "MPI" rows run `mpiexec -n RANKS gnn-dist assign` on the same graph
written as edge-list chunks (each rank reads its share; peak RSS is the
largest rank's, wall time the assign run alone), then `gnn-dist partition
--assignment` to count cut and halo like the other rows.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNS = {"metis": [], "fennel": [], "fennel, 2 passes": ["--passes", "2"], "ldg": [], "random": [],
        "fennel, MPI": [], "fennel, MPI, 2 passes": ["--passes", "2"]}


def write_chunks(dataset: str, folder: Path, count: int = 8) -> None:
    """The benchmark graph as edge-list chunk files, for the MPI assigner to read."""
    import numpy as np

    from gnn_dist.data import load_dataset

    src, dst = load_dataset(dataset).edge_index()
    for i, (s, d) in enumerate(zip(np.array_split(src, count), np.array_split(dst, count))):
        np.save(folder / f"edges-{i}.npy", np.stack([s, d], 1))


def run_mpi(a, extra: list, folder: Path, out: Path) -> tuple:
    """mpiexec assign, then partition --assignment for the stats: (wall, assign, peak rank MB, partition.json)."""
    chunks = folder / "chunks"
    if not chunks.is_dir():
        chunks.mkdir()
        write_chunks(a.dataset, chunks)
    mpiexec = str(Path(sys.executable).with_name("mpiexec"))
    t = time.perf_counter()
    r = subprocess.run([mpiexec, "-n", str(a.ranks), sys.executable, "-m", "gnn_dist", "assign", "--edges",
                        str(chunks), "--parts", str(a.parts), "--out", str(folder / "parts.npy"), "--force", *extra],
                       capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t
    if r.returncode != 0:
        sys.exit(f"MPI assign failed:\n{r.stderr[-2000:]}")
    assign = float(re.search(r"assign ([\d.]+)s", r.stdout).group(1))
    rss = max(float(m) for m in re.search(r"peak RSS per rank MB ([\d/]+)", r.stdout).group(1).split("/"))
    r = subprocess.run([sys.executable, "-m", "gnn_dist", "partition", "--dataset", f"edges:{chunks}", "--parts",
                        str(a.parts), "--assignment", str(folder / "parts.npy"), "--out", str(out)],
                       capture_output=True, text=True, cwd=ROOT)
    if r.returncode != 0:
        sys.exit(f"partition --assignment failed:\n{r.stderr[-2000:]}")
    return wall, assign, rss, json.loads((out / "partition.json").read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="rmat:scale=20,edges=10000000,features=16,seed=0")
    ap.add_argument("--parts", type=int, default=8)
    ap.add_argument("--ranks", type=int, default=2, help="MPI ranks for the MPI rows (default 2)")
    ap.add_argument("--only", default=None, help="semicolon-separated subset of: " + "; ".join(RUNS))
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for name, extra in RUNS.items():
            if a.only and name not in [o.strip() for o in a.only.split(";")]:
                continue
            out = Path(d) / name.replace(" ", "").replace(",", "")
            if "MPI" in name:
                wall, assign, rss, meta = run_mpi(a, extra, Path(d), out)
                s = meta["stats"]
                rows.append((f"{name} ({a.ranks} ranks)", wall, assign, rss, s["edge_cut"], s["edge_cut_fraction"],
                             s["halo_total"], s["balance"]))
                print(f"[bench] {name}: {wall:.1f}s", file=sys.stderr, flush=True)
                shutil.rmtree(out)
                continue
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
            shutil.rmtree(out)
    print(f"\n{a.dataset}: {meta['num_nodes']} nodes, {meta['num_edges']} edges, {a.parts} parts")
    base = next((r for r in rows if r[0] == "metis"), rows[0])
    print("| method | wall s | assign s | peak RSS MB | edge cut | cut fraction | halo rows | x METIS halo | balance |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, wall, assign, rss, cut, frac, halo, bal in rows:
        print(f"| {name} | {wall:.1f} | {assign:.1f} | {rss:.0f} | {cut} | {frac:.3f} | {halo} | {halo / base[6]:.2f} | {bal:.3f} |")  # noqa: E501


if __name__ == "__main__":
    main()
