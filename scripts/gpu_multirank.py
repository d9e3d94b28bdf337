"""Ranks sharing one GPU: gnn-dist at P = 1, 2 and 4 on one device, epoch times and losses against P=1.

    python scripts/gpu_multirank.py [--dataset SPEC] [--ranks 1,2,4] [--epochs 10] [--device cuda|cpu]

Partitions the graph for each P, trains `mpiexec -n P gnn-dist train --dropout 0` (hidden-layer dropout
draws per rank, so only a run without it can equal P=1) with only the first GPU visible, so P > 1 takes
the host-staged path, and prints one table: the line rank 0 printed about its placement, the median
epoch (the first left out: start-up), its ratio to P=1, and the largest absolute and relative
difference of the per-epoch losses from P=1's, each row as soon as its run ends. The last lines check
issue 31's goals: P > 1 within rtol 1e-5, atol 1e-6 of P=1, and P=4's epoch under 3x P=1's. `--device
cpu` runs the same on the CPU with every collective staged through host buffers (GNN_DIST_STAGE_HOST=1),
to try the script anywhere. Exit status 1 if the losses differ (a bug); a slow P=4 is a figure, reported
as missed in its goal line but not in the exit status (a shared or oversubscribed machine makes it so).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MPIEXEC = str(Path(sys.executable).with_name("mpiexec"))
DEFAULT = "sbm:nodes=200000,avg_degree=16,homophily=0.9,features=128,classes=16"


def run(cmd: list[str], env: dict) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=str(ROOT), **env))
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stderr[-3000:]}")
    return r


def train(part: Path, ranks: int, log: Path, a: argparse.Namespace, env: dict) -> tuple[str, list[dict]]:
    """One launch; returns rank 0's placement line and the per-epoch records."""
    r = run([MPIEXEC, "-n", str(ranks), sys.executable, "-m", "gnn_dist", "train", "--partition", str(part),
             "--epochs", str(a.epochs), "--hidden", str(a.hidden), "--dropout", "0", "--eval-every", "0", "--quiet",
             "--log", str(log), *(["--backend", "gloo"] if a.device == "cpu" else [])], env)
    note = next((ln[len("[gnn-dist] "):] for ln in r.stderr.splitlines() if ln.startswith("[gnn-dist] ")), "-")
    return note, [json.loads(ln) for ln in log.read_text().splitlines() if '"loss"' in ln]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default=DEFAULT)
    ap.add_argument("--ranks", default="1,2,4")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    a = ap.parse_args()
    if a.epochs < 2:
        ap.error("--epochs must be at least 2 (the first is left out of the timing)")
    first = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0]
    env = {"CUDA_VISIBLE_DEVICES": first} if a.device == "cuda" else {"GNN_DIST_STAGE_HOST": "1"}
    ranks = [int(x) for x in a.ranks.split(",")]
    print(f"\n{a.dataset}, GCN, hidden {a.hidden}, dropout 0, {a.epochs} epochs, {a.device} (one device shared), "
          f"{os.cpu_count()} cores")
    print(f"{'P':>2} {'epoch s':>9} {'x P=' + str(ranks[0]):>7} {'max |dloss|':>12} {'max rel':>9}  placement", flush=True)
    close, epochs, base_loss, worst = True, {}, None, 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for p in ranks:
            part = Path(tmp) / f"p{p}"
            run([sys.executable, "-m", "gnn_dist", "partition", "--dataset", a.dataset, "--parts", str(p),
                 "--out", str(part)], {})
            note, recs = train(part, p, Path(tmp) / f"p{p}.jsonl", a, env)
            loss = np.array([r["loss"] for r in recs])
            epochs[p] = float(np.median([r["epoch_time"] for r in recs[1:]]))
            base_loss = loss if base_loss is None else base_loss
            diff = np.abs(loss - base_loss)
            worst = max(worst, float(diff.max()))
            close &= bool(np.all(diff <= 1e-6 + 1e-5 * np.abs(base_loss)))
            print(f"{p:>2} {epochs[p]:>9.4f} {epochs[p] / epochs[ranks[0]]:>7.2f} {diff.max():>12.3e} "
                  f"{(diff / np.abs(base_loss)).max():>9.2e}  {note}", flush=True)
    print(f"goal: P>1 losses within rtol 1e-5, atol 1e-6 of P={ranks[0]} ({a.device}): measured largest |dloss| "
          f"{worst:.3e}, {'met' if close else 'missed'}")
    if 4 in epochs:
        ratio = epochs[4] / epochs[ranks[0]]
        print(f"goal: P=4 epoch under 3x P={ranks[0]}'s ({a.device}): measured {ratio:.2f}x, "
              f"{'met' if ratio < 3 else 'missed'}", flush=True)
    sys.exit(0 if close else 1)


if __name__ == "__main__":
    main()
