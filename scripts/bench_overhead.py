"""A rank's fixed memory: its unique memory (USS) above a bare `import torch` process, at P = 1, 2 and 4.

    python scripts/bench_overhead.py [--ranks 1,2,4] [--dataset karate] [--also cora]

For each P, two launches of P processes under mpiexec, side by side:
- bare: `python -c "import torch"`, each reading its own USS while all P are alive;
- gnn-dist: `gnn-dist train` on a graph small enough that its data is a few kilobytes (karate by default),
  each rank's USS after the first epoch (`--memory-report`'s "USS now").
Both sides run P processes at once, so the pages ranks share (torch's code, which USS leaves out once a
second process maps it) count alike on both. The difference is what gnn-dist adds per rank: its imports,
torch.distributed and MPI, the autograd and thread-pool state of a training step.

`--also cora` adds the same for Cora, whose 2708 x 1433 input is large enough for the numba dropout
kernels: the overhead then includes numba (about 100 MB alone, 70 MB of it code pages that ranks on one
host share) and Cora's own features and activations.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

BIN = Path(sys.executable).parent
BARE = ("import time, torch, psutil; time.sleep(3); "
        "print('USS', psutil.Process().memory_full_info().uss / 2**20, flush=True)")


def bare_uss(p: int) -> list[float]:
    out = subprocess.run([str(BIN / "mpiexec"), "-n", str(p), sys.executable, "-c", BARE],
                         capture_output=True, text=True, check=True).stdout
    return [float(x) for x in re.findall(r"^USS ([\d.]+)", out, re.M)]


def rank_uss(dataset: str, p: int, tmp: Path) -> list[float]:
    part = tmp / f"{dataset}-{p}"
    subprocess.run([str(BIN / "gnn-dist"), "partition", "--dataset", dataset, "--parts", str(p), "--out", str(part)],
                   capture_output=True, text=True, check=True)
    r = subprocess.run([str(BIN / "mpiexec"), "-n", str(p), str(BIN / "gnn-dist"), "train", "--partition", str(part),
                        "--epochs", "2", "--memory-report", "--quiet"], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"training failed:\n{r.stderr[-2000:]}")
    lines = r.stdout + r.stderr
    header = next(x for x in lines.splitlines() if x.startswith("rank ") and "USS now" in x)
    rows = [x.split() for x in lines.splitlines() if re.match(r"^\s+\d+\s+[\d.]", x)]
    assert header.rstrip().endswith("USS now") and len(rows) == p, lines[-2000:]
    return [float(r[-1]) for r in rows]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", default="1,2,4")
    ap.add_argument("--dataset", default="karate")
    ap.add_argument("--also", default="", help="comma-separated graphs to add rows for (e.g. cora)")
    a = ap.parse_args()
    graphs = [a.dataset] + [g for g in a.also.split(",") if g]
    print(f"{'graph':<10} {'P':>2} {'bare torch USS/rank MB':>23} {'gnn-dist rank USS MB':>21} "
          f"{'overhead MB (max rank)':>22}")
    with tempfile.TemporaryDirectory() as tmp:
        for graph in graphs:
            for p in (int(x) for x in a.ranks.split(",")):
                bare, ranks = bare_uss(p), rank_uss(graph, p, Path(tmp))
                base = sum(bare) / len(bare)
                print(f"{graph:<10} {p:>2} {base:>23.0f} {'/'.join(f'{u:.0f}' for u in ranks):>21} "
                      f"{max(ranks) - base:>22.0f}", flush=True)


if __name__ == "__main__":
    main()
