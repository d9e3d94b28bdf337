"""Peak memory of reading an ogbn-papers100M-shaped folder: features stream into a memory map, never held twice.

python scripts/bench_ogb_memory.py [--nodes 2000000] [--width 128] [--edges 4000000]

Writes a folder in papers100M's binary layout (raw/data.npz with float16 node_feat, raw/node-label.npz,
split/time/*.csv.gz) with random contents, then loads it with `ogb:ogbn-papers100M` in a fresh process
while a sampler reads /proc/self/status every 5 ms. Prints the features' size in float32 beside the
peak anonymous memory (what a copy would add to) and the peak resident file pages (the map itself,
which the kernel may drop at will).
"""
from __future__ import annotations

import argparse
import gzip
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

PROBE = r"""
import sys, threading, time
peak = {"RssAnon": 0, "RssFile": 0}
def sample():
    while True:
        for line in open("/proc/self/status"):
            k = line.split(":")[0]
            if k in peak:
                peak[k] = max(peak[k], int(line.split()[1]))
        time.sleep(0.005)
threading.Thread(target=sample, daemon=True).start()
from gnn_dist.data import load_dataset
t = time.perf_counter()
g = load_dataset("ogb:ogbn-papers100M", data_dir=sys.argv[1])
dt = time.perf_counter() - t
time.sleep(0.05)
print(g.num_nodes, g.x.nbytes, peak["RssAnon"] * 1024, peak["RssFile"] * 1024, dt)
"""


def write_folder(root: Path, n: int, width: int, e: int) -> None:
    raw, split = root / "ogbn_papers100M" / "raw", root / "ogbn_papers100M" / "split" / "time"
    raw.mkdir(parents=True)
    split.mkdir(parents=True)
    rng = np.random.default_rng(0)
    np.savez(raw / "data.npz", edge_index=rng.integers(0, n, (2, e)), num_nodes_list=np.array([n]),
             num_edges_list=np.array([e]), node_feat=rng.standard_normal((n, width), dtype=np.float32).astype(np.float16))
    label = np.full((n, 1), np.nan, np.float32)
    label[: n // 10, 0] = rng.integers(0, 172, n // 10)
    np.savez(raw / "node-label.npz", node_label=label)
    for name, (a, b) in (("train", (0, n // 20)), ("valid", (n // 20, n // 15)), ("test", (n // 15, n // 10))):
        with gzip.open(split / f"{name}.csv.gz", "wt") as fh:
            fh.write("\n".join(map(str, range(a, b))) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=2_000_000)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--edges", type=int, default=4_000_000)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        write_folder(Path(tmp), a.nodes, a.width, a.edges)
        env = {"XDG_CACHE_HOME": str(Path(tmp) / "cache"), "PATH": "/usr/bin:/bin"}
        out = subprocess.run([sys.executable, "-c", PROBE, tmp], capture_output=True, text=True, env=env,
                             cwd=Path(__file__).resolve().parents[1])
        if out.returncode:
            sys.exit(out.stderr[-2000:])
        n, xbytes, anon, filepages, dt = out.stdout.split()
    mb = 2**20
    print(f"| nodes | features (float32) | peak anonymous memory | x anonymous / features | peak mapped file pages "
          f"| load s |\n|---|---|---|---|---|---|\n| {int(n):,} x {a.width} | {int(xbytes) / mb:.0f} MB | "
          f"{int(anon) / mb:.0f} MB | {int(anon) / int(xbytes):.2f} | {int(filepages) / mb:.0f} MB | {float(dt):.1f} |")


if __name__ == "__main__":
    main()
